package deploy

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/sparkim/spark/pkg/config"
)

// composeEnv stands in for the operator's .env (deploy/compose/.env.example).
var composeEnv = []string{
	"SPARK_TAG=" + imageTag,
	"SPARK_CLUSTER_SECRET=compose-cluster-secret",
	"SPARK_JWT_SECRET=compose-jwt-secret",
	"SPARK_API_KEYS=compose-api-key",
	"SPARK_MYSQL_PASSWORD=compose-mysql-password",
}

func loadCompose(t *testing.T, env []string) (*types.Project, error) {
	t.Helper()
	dir := filepath.Join(root(t), "deploy", "compose")
	opts, err := cli.NewProjectOptions([]string{filepath.Join(dir, "compose.yaml")},
		cli.WithWorkingDirectory(dir), cli.WithEnv(env), cli.WithInterpolation(true),
		cli.WithResolvedPaths(true), cli.WithConsistency(true))
	if err != nil {
		t.Fatal(err)
	}
	return cli.ProjectFromOptions(context.Background(), opts)
}

// TestComposeFile loads deploy/compose/compose.yaml with compose-go (the
// loader docker compose and podman compose share) and checks it against
// the images and the config: our services build from our Containerfiles
// over the context make images fills, every published port is one the
// image exposes and the config's default for that listener, the
// addresses between services name the default ports, depends_on orders
// MySQL, migrate, logic, deliver, the gates and Nginx, and each process's
// environment over the image's config passes config.Load.
func TestComposeFile(t *testing.T) {
	if _, err := loadCompose(t, composeEnv[:1]); err == nil || !strings.Contains(err.Error(), "SPARK_CLUSTER_SECRET") {
		t.Errorf("compose file loads without its secrets (want a SPARK_CLUSTER_SECRET error): %v", err)
	}
	p, err := loadCompose(t, composeEnv)
	if err != nil {
		t.Fatalf("compose-go: %v", err)
	}
	var names []string
	for n := range p.Services {
		names = append(names, n)
	}
	sort.Strings(names)
	if want := []string{"deliver", "gate-1", "gate-2", "logic", "migrate", "mysql", "nginx", "redis"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("services %v, want %v", names, want)
	}

	def := config.Default()
	containerCfg := filepath.Join(root(t), "deploy", "containers", "im.yaml")
	// The container config keeps every default port.
	cc, err := config.Load(containerCfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, pair := range [][2]string{{cc.Gate.TCPAddr, def.Gate.TCPAddr}, {cc.Gate.WSAddr, def.Gate.WSAddr},
		{cc.Gate.TLSAddr, def.Gate.TLSAddr}, {cc.Gate.PushAddr, def.Gate.PushAddr}, {cc.Gate.AdminAddr, def.Gate.AdminAddr},
		{cc.Logic.GRPCAddr, def.Logic.GRPCAddr}, {cc.Logic.AdminAddr, def.Logic.AdminAddr}, {cc.Deliver.AdminAddr, def.Deliver.AdminAddr}} {
		if portOf(t, pair[0]) != portOf(t, pair[1]) {
			t.Errorf("deploy/containers/im.yaml listens on %s, the default port is %s's", pair[0], pair[1])
		}
	}

	exposed := imagePorts(t)
	procOf := map[string]string{"migrate": "migrate", "logic": "logic", "deliver": "deliver", "gate-1": "gate", "gate-2": "gate"}
	contextDir := filepath.Join(root(t), ".run", "images", "context")
	for svc, proc := range procOf {
		s := p.Services[svc]
		if want := "localhost/spark-" + proc + ":" + imageTag; s.Image != want {
			t.Errorf("%s: image %q, want %q", svc, s.Image, want)
		}
		if s.Build == nil {
			t.Errorf("%s: no build section", svc)
			continue
		}
		if filepath.Clean(s.Build.Context) != contextDir {
			t.Errorf("%s: build context %s, want %s (what make images fills)", svc, s.Build.Context, contextDir)
		}
		df := s.Build.Dockerfile
		if !filepath.IsAbs(df) {
			df = filepath.Join(s.Build.Context, df)
		}
		if want := filepath.Join(root(t), "deploy", "containers", "Containerfile."+proc); filepath.Clean(df) != want {
			t.Errorf("%s: builds from %s, want %s", svc, df, want)
		} else if !exists(want) {
			t.Errorf("%s: %s missing", svc, want)
		}
		for _, port := range s.Ports {
			target := strconv.Itoa(int(port.Target)) + "/tcp"
			if !contains(exposed[proc], target) {
				t.Errorf("%s: publishes container port %s, which spark-%s does not expose (%v)", svc, target, proc, exposed[proc])
			}
		}
		// The process's environment over the image's config loads and
		// validates, as it will at start.
		t.Run("config/"+svc, func(t *testing.T) {
			for k, v := range s.Environment {
				if v == nil {
					t.Fatalf("%s: %s has no value", svc, k)
				}
				t.Setenv(k, *v)
			}
			cfg, err := config.Load(containerCfg)
			if err != nil {
				t.Fatalf("%s: %v", svc, err)
			}
			switch proc {
			case "gate":
				if cfg.Gate.ID != svc || cfg.Gate.PushAdvertise != svc+":"+portOf(t, def.Gate.PushAddr) {
					t.Errorf("%s: gate.id %q push_advertise %q", svc, cfg.Gate.ID, cfg.Gate.PushAdvertise)
				}
				if !reflect.DeepEqual(cfg.Gate.LogicAddrs, []string{"logic:" + portOf(t, def.Logic.GRPCAddr)}) {
					t.Errorf("%s: gate.logic_addrs %v", svc, cfg.Gate.LogicAddrs)
				}
			case "deliver":
				if !reflect.DeepEqual(cfg.Deliver.LogicAddrs, []string{"logic:" + portOf(t, def.Logic.GRPCAddr)}) {
					t.Errorf("deliver.logic_addrs %v", cfg.Deliver.LogicAddrs)
				}
			case "logic", "migrate":
				if !strings.Contains(cfg.Logic.MySQL.DSN, "@tcp(mysql:3306)/") {
					t.Errorf("%s: logic.mysql.dsn %q", svc, cfg.Logic.MySQL.DSN)
				}
			}
		})
	}

	// Nginx: every placeholder of the template is set, and the upstreams
	// are the gates' TLS and WebSocket ports.
	tmpl, err := os.ReadFile(filepath.Join(root(t), "deploy", "nginx", "nginx.conf.template"))
	if err != nil {
		t.Fatal(err)
	}
	nginx := p.Services["nginx"]
	for _, m := range regexp.MustCompile(`\$\{(SPARK_[A-Z_]+)\}`).FindAllStringSubmatch(string(tmpl), -1) {
		if v := nginx.Environment[m[1]]; v == nil || *v == "" {
			t.Errorf("nginx: template placeholder %s not set", m[1])
		}
	}
	for key, port := range map[string]string{"SPARK_GATES_TLS": portOf(t, def.Gate.TLSAddr), "SPARK_GATES_WS": portOf(t, def.Gate.WSAddr)} {
		want := "server gate-1:" + port + "; server gate-2:" + port + ";"
		if v := nginx.Environment[key]; v == nil || *v != want {
			t.Errorf("nginx: %s = %v, want %q", key, v, want)
		}
	}

	// depends_on, with the condition each start needs.
	deps := map[string]map[string]string{
		"migrate": {"mysql": types.ServiceConditionHealthy},
		"logic":   {"migrate": types.ServiceConditionCompletedSuccessfully, "mysql": types.ServiceConditionHealthy, "redis": types.ServiceConditionHealthy},
		"deliver": {"redis": types.ServiceConditionHealthy, "logic": types.ServiceConditionStarted},
		"gate-1":  {"logic": types.ServiceConditionStarted},
		"gate-2":  {"logic": types.ServiceConditionStarted},
		"nginx":   {"gate-1": types.ServiceConditionStarted, "gate-2": types.ServiceConditionStarted},
		"mysql":   {},
		"redis":   {},
	}
	for svc, want := range deps {
		got := map[string]string{}
		for dep, d := range p.Services[svc].DependsOn {
			got[dep] = d.Condition
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: depends_on %v, want %v", svc, got, want)
		}
	}
	for _, svc := range []string{"mysql", "redis"} {
		if p.Services[svc].HealthCheck == nil {
			t.Errorf("%s: no healthcheck, which service_healthy needs", svc)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
