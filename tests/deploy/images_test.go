package deploy

import (
	"debug/elf"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/sparkim/spark/pkg/config"
	"github.com/sparkim/spark/tests/framework"
)

// imageTag is what this test binary builds (make images builds :dev): its
// own, so two runs on one machine never remove each other's images;
// TestMain removes them at the end.
var imageTag = fmt.Sprintf("test-%d", os.Getpid())

// TestMain runs the tests and then removes the images buildImages built.
func TestMain(m *testing.M) {
	code := m.Run()
	if imagesBuilt {
		for _, proc := range []string{"gate", "logic", "deliver", "migrate"} {
			_ = exec.Command("podman", "rmi", "localhost/spark-"+proc+":"+imageTag).Run()
		}
	}
	os.Exit(code)
}

// imagePorts are the ports each image must EXPOSE: the listeners of the
// container config (deploy/containers/im.yaml), which keeps the default
// ports.
func imagePorts(t testing.TB) map[string][]string {
	t.Helper()
	cfg, err := config.Load(filepath.Join(root(t), "deploy", "containers", "im.yaml"))
	if err != nil {
		t.Fatalf("container config: %v", err)
	}
	ports := func(addrs ...string) []string {
		var out []string
		for _, a := range addrs {
			out = append(out, portOf(t, a)+"/tcp")
		}
		sort.Strings(out)
		return out
	}
	return map[string][]string{
		"gate":    ports(cfg.Gate.TCPAddr, cfg.Gate.WSAddr, cfg.Gate.TLSAddr, cfg.Gate.PushAddr, cfg.Gate.AdminAddr),
		"logic":   ports(cfg.Logic.GRPCAddr, cfg.Logic.HTTPAddr, cfg.Logic.AdminAddr),
		"deliver": ports(cfg.Deliver.AdminAddr),
		"migrate": nil,
	}
}

type imageConfig struct {
	Config struct {
		User         string
		Entrypoint   []string
		Cmd          []string
		ExposedPorts map[string]struct{}
		Labels       map[string]string
	}
}

// TestContainerImages builds every image with podman (deploy/containers/
// build.sh, what make images runs) and inspects it: a non-root numeric
// user, the entrypoint with the config path, the exposed ports, the OCI
// labels, and a file system of exactly the static binary and the config
// (no shell, no libc), read from `podman image mount`. Running them is not
// possible in this sandbox.
func TestContainerImages(t *testing.T) {
	podman := buildImages(t)
	wantPorts := imagePorts(t)
	rev, err := exec.Command("git", "-C", root(t), "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	revision := strings.TrimSpace(string(rev))
	for _, proc := range []string{"gate", "logic", "deliver", "migrate"} {
		image := fmt.Sprintf("localhost/spark-%s:%s", proc, imageTag)
		out, err := exec.Command(podman, "image", "inspect", image).Output()
		if err != nil {
			t.Fatalf("podman image inspect %s: %v", image, err)
		}
		var cfgs []imageConfig
		if err := json.Unmarshal(out, &cfgs); err != nil || len(cfgs) != 1 {
			t.Fatalf("%s: inspect output: %v\n%s", image, err, out)
		}
		c := cfgs[0].Config
		if c.User != "65532:65532" {
			t.Errorf("%s: user %q, want 65532:65532 (non-root, numeric: scratch has no /etc/passwd)", image, c.User)
		}
		if want := []string{"/spark/" + proc, "-config", "/etc/spark/im.yaml"}; !reflect.DeepEqual(c.Entrypoint, want) || len(c.Cmd) != 0 {
			t.Errorf("%s: entrypoint %q cmd %q, want %q", image, c.Entrypoint, c.Cmd, want)
		}
		var ports []string
		for p := range c.ExposedPorts {
			ports = append(ports, p)
		}
		sort.Strings(ports)
		if !reflect.DeepEqual(ports, wantPorts[proc]) {
			t.Errorf("%s: exposes %v, want %v", image, ports, wantPorts[proc])
		}
		for _, l := range []string{"title", "description", "version", "revision"} {
			if c.Labels["org.opencontainers.image."+l] == "" {
				t.Errorf("%s: label org.opencontainers.image.%s missing", image, l)
			}
		}
		if got := c.Labels["org.opencontainers.image.title"]; got != "spark-"+proc {
			t.Errorf("%s: title label %q", image, got)
		}
		if got := c.Labels["org.opencontainers.image.revision"]; got != revision {
			t.Errorf("%s: revision label %q, want the checkout's %q (a stale build cache?)", image, got, revision)
		}
		checkImageFiles(t, image, proc, mountImage(t, podman, image))
	}
}

var (
	imagesOnce  sync.Once
	imagesErr   error
	imagesBuilt bool
)

// buildImages builds the images once per test binary with
// deploy/containers/build.sh (what make images runs) and returns podman.
func buildImages(t *testing.T) string {
	t.Helper()
	podman, err := exec.LookPath("podman")
	if err != nil {
		t.Fatalf("podman not found (make test-deps installs it): %v", err)
	}
	imagesOnce.Do(func() {
		ctx, err := os.MkdirTemp("", "spark-image-context-")
		if err != nil {
			imagesErr = err
			return
		}
		defer os.RemoveAll(ctx)
		build := exec.Command(filepath.Join(root(t), "deploy", "containers", "build.sh"), imageTag)
		build.Env = append(os.Environ(), "SPARK_IMAGE_CONTEXT="+ctx)
		imagesBuilt = true
		if out, err := build.CombinedOutput(); err != nil {
			imagesErr = fmt.Errorf("build.sh: %w\n%s", err, out)
		}
	})
	if imagesErr != nil {
		t.Fatal(imagesErr)
	}
	return podman
}

// mountImage mounts the image's file system read-only until t ends.
func mountImage(t *testing.T, podman, image string) string {
	t.Helper()
	out, err := exec.Command(podman, "image", "mount", image).CombinedOutput()
	if err != nil {
		t.Fatalf("podman image mount %s: %v\n%s", image, err, out)
	}
	t.Cleanup(func() { _ = exec.Command(podman, "image", "unmount", image).Run() })
	return strings.TrimSpace(string(out))
}

// TestContainerImagesRunACluster runs what the images hold, since running
// the containers is impossible here: from each mounted image its
// entrypoint (the static binary and -config with the image's own config
// file), with the environment compose.yaml gives that service, in
// compose's start order, and the smoke session over it (smokeCluster
// says what it overrides). The compose bind mount of ./tls is a
// directory of test certificates.
func TestContainerImagesRunACluster(t *testing.T) {
	podman := buildImages(t)
	p, err := loadCompose(t, composeEnv)
	if err != nil {
		t.Fatal(err)
	}
	tlsDir := t.TempDir()
	ca := framework.NewTestCA(t)
	cert := ca.IssueServer(t, tlsDir, 1, "gate-1", "gate-2")
	for from, to := range map[string]string{cert.CertFile: "gate.crt", cert.KeyFile: "gate.key"} {
		if err := os.Rename(from, filepath.Join(tlsDir, to)); err != nil {
			t.Fatal(err)
		}
	}
	var procs []smokeProc
	for _, svc := range []string{"migrate", "logic", "deliver", "gate-1", "gate-2"} {
		s := p.Services[svc]
		proc := strings.TrimPrefix(strings.SplitN(s.Image, ":", 2)[0], "localhost/spark-")
		mnt := mountImage(t, podman, s.Image)
		out, err := exec.Command(podman, "image", "inspect", s.Image).Output()
		if err != nil {
			t.Fatalf("podman image inspect %s: %v", s.Image, err)
		}
		var cfgs []imageConfig
		if err := json.Unmarshal(out, &cfgs); err != nil || len(cfgs) != 1 || len(cfgs[0].Config.Entrypoint) != 3 {
			t.Fatalf("%s: inspect: %v\n%s", s.Image, err, out)
		}
		ep := cfgs[0].Config.Entrypoint
		var env []string
		for k, v := range s.Environment {
			val := *v
			if strings.HasPrefix(val, "/etc/spark/tls/") {
				val = filepath.Join(tlsDir, strings.TrimPrefix(val, "/etc/spark/tls/"))
			}
			env = append(env, k+"="+val)
		}
		sort.Strings(env)
		sp := smokeProc{name: svc, role: proc, bin: filepath.Join(mnt, ep[0]),
			args: []string{ep[1], filepath.Join(mnt, ep[2])}, env: env, oneshot: proc == "migrate"}
		if proc == "gate" {
			sp.gateID = svc
		}
		procs = append(procs, sp)
	}
	smokeCluster(t, procs)
}

// checkImageFiles wants in the image's mounted file system dir exactly the
// binary, statically linked, and the config.
func checkImageFiles(t *testing.T, image, proc, dir string) {
	t.Helper()
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			files = append(files, "/"+rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	if want := []string{"/etc/spark/im.yaml", "/spark/" + proc}; !reflect.DeepEqual(files, want) {
		t.Errorf("%s: files %v, want only %v (no shell, no libc)", image, files, want)
	}
	f, err := elf.Open(filepath.Join(dir, "spark", proc))
	if err != nil {
		t.Fatalf("%s: binary: %v", image, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: /spark/%s is dynamically linked (has an interpreter); build with CGO_ENABLED=0", image, proc)
		}
	}
}

// portOf is the port of a host:port address.
func portOf(t testing.TB, addr string) string {
	t.Helper()
	i := strings.LastIndex(addr, ":")
	if i < 0 {
		t.Fatalf("address %q has no port", addr)
	}
	return addr[i+1:]
}
