package framework

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Nginx is a real Nginx master process run by a test on loopback, with
// its own prefix, configuration, pid file, logs and temp files in a
// t.TempDir(), in the foreground (daemon off), stopped when the test ends.
type Nginx struct {
	t   testing.TB
	bin string
	// Dir is the prefix; LogDir, TempDir and ModulesConf are the values
	// for the template's SPARK_NGINX_LOG_DIR, SPARK_NGINX_TEMP_DIR and
	// SPARK_NGINX_MODULES_CONF; User is SPARK_NGINX_USER.
	Dir, LogDir, TempDir, ModulesConf, User string

	cmd    *exec.Cmd
	output bytes.Buffer
	exited chan struct{}
}

// NewNginx finds the nginx binary (PATH, then /usr/sbin/nginx) and its
// stream module and prepares a private prefix. A missing Nginx or stream
// module fails the test with the command that installs them.
func NewNginx(t testing.TB) *Nginx {
	t.Helper()
	bin, err := exec.LookPath("nginx")
	if err != nil {
		bin = "/usr/sbin/nginx"
		if _, serr := os.Stat(bin); serr != nil {
			t.Fatalf("nginx not found in PATH or at /usr/sbin/nginx: run `make test-deps` (deploy/dev/test-deps.sh installs nginx and libnginx-mod-stream)")
		}
	}
	out, err := exec.Command(bin, "-V").CombinedOutput()
	if err != nil {
		t.Fatalf("%s -V: %v\n%s", bin, err, out)
	}
	n := &Nginx{t: t, bin: bin, Dir: t.TempDir(), exited: make(chan struct{})}
	n.LogDir = filepath.Join(n.Dir, "logs")
	n.TempDir = filepath.Join(n.Dir, "temp")
	modules := filepath.Join(n.Dir, "modules-enabled")
	for _, d := range []string{n.LogDir, n.TempDir, modules} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.ModulesConf = filepath.Join(modules, "*.conf")
	if load, err := streamModuleLoad(string(out)); err != nil {
		t.Fatalf("%s: %v: run `make test-deps` (deploy/dev/test-deps.sh installs libnginx-mod-stream)", bin, err)
	} else if load != "" {
		if err := os.WriteFile(filepath.Join(modules, "stream.conf"), []byte(load+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The master starts as this user; workers run as SPARK_NGINX_USER
	// and must reach the files in the test's 0700 temporary directory.
	n.User = "root"
	if u, err := user.Current(); err == nil && os.Geteuid() != 0 {
		n.User = u.Username
	}
	return n
}

// streamModuleLoad returns the load_module directive for a dynamic stream
// module ("" when it is compiled in), from `nginx -V`.
func streamModuleLoad(v string) (string, error) {
	switch {
	case strings.Contains(v, "--with-stream=dynamic"):
	case regexp.MustCompile(`--with-stream(\s|$)`).MatchString(v):
		return "", nil
	default:
		return "", errors.New("built without the stream module")
	}
	dir := "/usr/lib/nginx/modules"
	if m := regexp.MustCompile(`--modules-path=(\S+)`).FindStringSubmatch(v); m != nil {
		dir = m[1]
	}
	so := filepath.Join(dir, "ngx_stream_module.so")
	if _, err := os.Stat(so); err != nil {
		return "", fmt.Errorf("stream module is dynamic but missing: %w", err)
	}
	return "load_module " + so + ";", nil
}

// RenderTemplate reads a configuration template and replaces each
// ${NAME} placeholder with vars[NAME]. A SPARK_ placeholder without a
// value, or a value whose placeholder the template lacks, is an error, so
// a template and its renderer cannot drift apart silently.
func RenderTemplate(path string, vars map[string]string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("template: %w", err)
	}
	s := string(b)
	var unused []string
	for k, v := range vars {
		ph := "${" + k + "}"
		if !strings.Contains(s, ph) {
			unused = append(unused, k)
			continue
		}
		s = strings.ReplaceAll(s, ph, v)
	}
	if len(unused) > 0 {
		sort.Strings(unused)
		return "", fmt.Errorf("template %s has no placeholder for %s", path, strings.Join(unused, ", "))
	}
	if left := regexp.MustCompile(`\$\{SPARK_[A-Z0-9_]+\}`).FindAllString(s, -1); len(left) > 0 {
		return "", fmt.Errorf("template %s: no value for %s", path, strings.Join(left, ", "))
	}
	return s, nil
}

// Start writes conf as the configuration, runs Nginx in the foreground and
// waits until it accepts connections on probeAddr. The process is stopped
// (SIGTERM, then SIGKILL of its process group) when the test ends; if the
// test failed, its error log is printed.
func (n *Nginx) Start(conf, probeAddr string) {
	t := n.t
	t.Helper()
	confPath := filepath.Join(n.Dir, "nginx.conf")
	if err := os.WriteFile(confPath, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	errLog := filepath.Join(n.LogDir, "error.log")
	cmd := exec.Command(n.bin, "-p", n.Dir+"/", "-c", confPath, "-e", errLog,
		"-g", "daemon off; pid "+filepath.Join(n.Dir, "nginx.pid")+";")
	cmd.Stdout, cmd.Stderr = &n.output, &n.output
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	n.cmd = cmd
	go func() {
		_ = cmd.Wait()
		close(n.exited)
	}()
	t.Cleanup(n.stop)

	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", probeAddr, time.Second)
		if err == nil {
			_ = c.Close()
			return
		}
		select {
		case <-n.exited:
			t.Fatalf("nginx exited at start: %s\n%s\n%s", cmd.ProcessState, n.output.String(), n.ErrorLog())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("nginx not listening on %s within 10 s: %v\n%s", probeAddr, err, n.ErrorLog())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop ends Nginx: SIGTERM makes the master stop its workers and exit at
// once; if it has not within 5 s, the whole process group is killed.
func (n *Nginx) stop() {
	if n.cmd == nil || n.cmd.Process == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
		<-n.exited
	}
	if n.t.Failed() {
		n.t.Logf("---- nginx error log ----\n%s", n.ErrorLog())
	}
}

// ErrorLog is the content of Nginx's error log.
func (n *Nginx) ErrorLog() string { return n.readLog("error.log") }

// Log is the content of a log file in LogDir (an access log the
// configuration names).
func (n *Nginx) Log(name string) string { return n.readLog(name) }

func (n *Nginx) readLog(name string) string {
	b, err := os.ReadFile(filepath.Join(n.LogDir, name))
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	return string(b)
}
