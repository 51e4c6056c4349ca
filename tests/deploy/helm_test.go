package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/sparkim/spark/pkg/config"
)

// helmVersion is the helm the chart is checked with, built once by
// deploy/helm/build-helm.sh (make helm) into .run/tools/helm-<version>.
const helmVersion = "v4.3.2"

// releaseName is the release every test renders: the objects are named
// spark-gate, spark-logic, … and the gate pods spark-gate-0, -1, ….
const releaseName = "spark"

func chartDir(t testing.TB) string { return filepath.Join(root(t), "deploy", "helm", "spark") }

func helmBin(t testing.TB) string {
	t.Helper()
	p := filepath.Join(root(t), ".run", "tools", "helm-"+helmVersion, "helm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("helm %s not built (make helm, or deploy/helm/build-helm.sh): %v", helmVersion, err)
	}
	return p
}

// helm runs the helm CLI with a private home, so no user's repositories
// or plugins take part.
func helm(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(helmBin(t), args...)
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home+"/cache", "HELM_CONFIG_HOME="+home+"/config",
		"HELM_DATA_HOME="+home+"/data")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stderr.Bytes(), out)
	}
	return out, nil
}

// valuesFile is one of the chart's ci/ values files.
func valuesFile(t testing.TB, name string) string {
	return filepath.Join(chartDir(t), "ci", name)
}

// TestHelmChartLintStrict runs `helm lint --strict` (warnings fail) with
// the defaults plus the required secrets, and with every optional part
// on.
func TestHelmChartLintStrict(t *testing.T) {
	for _, v := range []string{"default-values.yaml", "full-values.yaml"} {
		out, err := helm(t, "lint", "--strict", chartDir(t), "-f", valuesFile(t, v))
		if err != nil {
			t.Errorf("%s: %v", v, err)
			continue
		}
		t.Logf("%s: %s", v, bytes.TrimSpace(out))
	}
}

// rendered is one `helm template` output, every document strictly
// decoded into its Kubernetes API type.
type rendered struct {
	configMaps      []*corev1.ConfigMap
	secrets         []*corev1.Secret
	services        []*corev1.Service
	statefulSets    []*appsv1.StatefulSet
	deployments     []*appsv1.Deployment
	hpas            []*autoscalingv2.HorizontalPodAutoscaler
	pdbs            []*policyv1.PodDisruptionBudget
	serviceMonitors []*monitoringv1.ServiceMonitor
}

// renderChart runs `helm template` with the values files and --set
// arguments given.
func renderChart(t testing.TB, args ...string) ([]byte, error) {
	t.Helper()
	return helm(t, append([]string{"template", releaseName, chartDir(t), "--namespace", "spark"}, args...)...)
}

// decodeRendered splits a rendering into documents and decodes each
// strictly (an unknown or duplicate field is an error) into the type its
// apiVersion and kind name; a kind the chart is not known to render is
// an error too.
func decodeRendered(out []byte) (*rendered, error) {
	r := &rendered{}
	rd := k8syaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	seen := map[string]bool{}
	for {
		doc, err := rd.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, err
		}
		if tm.Kind == "" {
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			return nil, fmt.Errorf("document without a kind:\n%s", doc)
		}
		var obj interface{ GetName() string }
		switch tm.APIVersion + "/" + tm.Kind {
		case "v1/ConfigMap":
			obj = appendNew(&r.configMaps)
		case "v1/Secret":
			obj = appendNew(&r.secrets)
		case "v1/Service":
			obj = appendNew(&r.services)
		case "apps/v1/StatefulSet":
			obj = appendNew(&r.statefulSets)
		case "apps/v1/Deployment":
			obj = appendNew(&r.deployments)
		case "autoscaling/v2/HorizontalPodAutoscaler":
			obj = appendNew(&r.hpas)
		case "policy/v1/PodDisruptionBudget":
			obj = appendNew(&r.pdbs)
		case "monitoring.coreos.com/v1/ServiceMonitor":
			obj = appendNew(&r.serviceMonitors)
		default:
			return nil, fmt.Errorf("%s %s: a kind the checks do not know", tm.APIVersion, tm.Kind)
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: strict decode: %w\n%s", tm.Kind, err, doc)
		}
		key := tm.Kind + "/" + obj.GetName()
		if seen[key] {
			return nil, fmt.Errorf("%s rendered twice", key)
		}
		seen[key] = true
	}
	return r, nil
}

// appendNew appends a new, empty object to list and returns it, for the
// decoder to fill.
func appendNew[T any, P interface {
	*T
	GetName() string
}](list *[]P) P {
	o := P(new(T))
	*list = append(*list, o)
	return o
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, l := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.Bytes()
}

func renderDecoded(t *testing.T, args ...string) *rendered {
	t.Helper()
	out, err := renderChart(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	r, err := decodeRendered(out)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// workload is a rendered StatefulSet or Deployment: its pod template and
// the pod names it gives (a Deployment's are random: "<name>-x").
type workload struct {
	kind, name string
	replicas   int
	selector   *metav1.LabelSelector
	pod        corev1.PodTemplateSpec
	stable     bool // pod names <name>-0, -1, …
}

func (w workload) podNames() []string {
	var names []string
	for i := 0; i < w.replicas; i++ {
		if w.stable {
			names = append(names, fmt.Sprintf("%s-%d", w.name, i))
		} else {
			names = append(names, fmt.Sprintf("%s-x%d", w.name, i))
		}
	}
	return names
}

func (r *rendered) workloads() []workload {
	var ws []workload
	for _, s := range r.statefulSets {
		n := 1
		if s.Spec.Replicas != nil {
			n = int(*s.Spec.Replicas)
		}
		ws = append(ws, workload{kind: "StatefulSet", name: s.Name, replicas: n, selector: s.Spec.Selector, pod: s.Spec.Template, stable: true})
	}
	for _, d := range r.deployments {
		n := 1
		if d.Spec.Replicas != nil {
			n = int(*d.Spec.Replicas)
		}
		for _, h := range r.hpas {
			if h.Spec.ScaleTargetRef.Kind == "Deployment" && h.Spec.ScaleTargetRef.Name == d.Name && h.Spec.MinReplicas != nil {
				n = int(*h.Spec.MinReplicas)
			}
		}
		ws = append(ws, workload{kind: "Deployment", name: d.Name, replicas: n, selector: d.Spec.Selector, pod: d.Spec.Template})
	}
	return ws
}

func (r *rendered) workload(t testing.TB, component string) workload {
	t.Helper()
	for _, w := range r.workloads() {
		if w.pod.Labels["app.kubernetes.io/component"] == component {
			return w
		}
	}
	t.Fatalf("no workload for %s", component)
	return workload{}
}

// secretValues are the rendered Secrets' keys, by Secret name.
func (r *rendered) secretValues() map[string]map[string]string {
	out := map[string]map[string]string{}
	for _, s := range r.secrets {
		m := map[string]string{}
		for k, v := range s.StringData {
			m[k] = v
		}
		for k, v := range s.Data {
			m[k] = string(v)
		}
		out[s.Name] = m
	}
	return out
}

var envRefRe = regexp.MustCompile(`\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// podEnv is the environment Kubernetes gives container c of pod podName
// with address podIP: env in order, $(VAR) expanded from the variables
// before it ($$ a literal $), fieldRef and secretKeyRef resolved from the
// rendered Secrets. A reference to a Secret the chart does not render
// (secrets.existingSecret) is reported in external and left out.
func podEnv(r *rendered, c corev1.Container, podName, podIP string) (env []string, external []string, err error) {
	if len(c.EnvFrom) > 0 {
		return nil, nil, fmt.Errorf("container %s: envFrom is not resolved by the checks", c.Name)
	}
	secrets := r.secretValues()
	defined := map[string]string{}
	for _, e := range c.Env {
		var v string
		switch {
		case e.ValueFrom == nil:
			v = envRefRe.ReplaceAllStringFunc(e.Value, func(m string) string {
				if m == "$$" {
					return "$"
				}
				if d, ok := defined[m[2:len(m)-1]]; ok {
					return d
				}
				return m
			})
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = podName
			case "status.podIP":
				v = podIP
			default:
				return nil, nil, fmt.Errorf("%s: fieldRef %s not resolved by the checks", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, ok := secrets[ref.Name]
			if !ok {
				external = append(external, ref.Name+"/"+ref.Key)
				continue
			}
			val, ok := s[ref.Key]
			if !ok {
				if ref.Optional != nil && *ref.Optional {
					continue
				}
				return nil, nil, fmt.Errorf("%s: Secret %s has no key %s", e.Name, ref.Name, ref.Key)
			}
			v = val
		default:
			return nil, nil, fmt.Errorf("%s: a valueFrom the checks do not resolve", e.Name)
		}
		defined[e.Name] = v
		env = append(env, e.Name+"="+v)
	}
	return env, external, nil
}

// podConfig loads the rendered im.yaml the way container c of pod
// podName loads it: its -config path under its ConfigMap mounts, with
// its environment.
func podConfig(t *testing.T, r *rendered, w workload, c corev1.Container, podName string) (*config.Config, []string) {
	t.Helper()
	env, external, err := podEnv(r, c, podName, "10.0.0.7")
	if err != nil {
		t.Fatalf("%s/%s: %v", w.name, c.Name, err)
	}
	args := containerArgs(t, r, w, c)
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	if len(args) != 2 || args[0] != "-config" {
		t.Fatalf("%s/%s: args %q, want -config <file>", w.name, c.Name, args)
	}
	cfg, err := config.Load(args[1])
	if err != nil {
		t.Fatalf("%s/%s: the rendered config with the pod's env: %v", w.name, c.Name, err)
	}
	return cfg, external
}

// containerArgs are c's arguments (after its binary) with every path
// under a ConfigMap mount rewritten to a directory holding that
// ConfigMap's rendered files.
func containerArgs(t testing.TB, r *rendered, w workload, c corev1.Container) []string {
	t.Helper()
	if len(c.Command) == 0 {
		t.Fatalf("%s/%s: no command: the checks need the argv the pod runs", w.name, c.Name)
	}
	mounts := map[string]string{} // mountPath -> local dir
	for _, vm := range c.VolumeMounts {
		for _, v := range w.pod.Spec.Volumes {
			if v.Name != vm.Name || v.ConfigMap == nil {
				continue
			}
			var cm *corev1.ConfigMap
			for _, m := range r.configMaps {
				if m.Name == v.ConfigMap.Name {
					cm = m
				}
			}
			if cm == nil {
				t.Fatalf("%s/%s: volume %s names ConfigMap %s, which the chart does not render", w.name, c.Name, v.Name, v.ConfigMap.Name)
			}
			dir := t.TempDir()
			for k, data := range cm.Data {
				if err := os.WriteFile(filepath.Join(dir, k), []byte(data), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			mounts[vm.MountPath] = dir
		}
	}
	args := append(append([]string{}, c.Command[1:]...), c.Args...)
	for i, a := range args {
		for mp, dir := range mounts {
			if strings.HasPrefix(a, mp+"/") {
				args[i] = filepath.Join(dir, strings.TrimPrefix(a, mp+"/"))
			}
		}
	}
	return args
}

// imageBinary maps the binary a container runs (/spark/<proc> in the
// images, deploy/containers) to the one make build writes.
func imageBinary(t testing.TB, c corev1.Container) string {
	t.Helper()
	if !strings.HasPrefix(c.Command[0], "/spark/") {
		t.Fatalf("container %s runs %s, not an image's /spark/<proc>", c.Name, c.Command[0])
	}
	proc := strings.TrimPrefix(c.Command[0], "/spark/")
	if !strings.HasSuffix(c.Image, "/spark-"+proc+":"+tagOf(c.Image)) {
		t.Errorf("container %s runs /spark/%s from image %s, not spark-%s", c.Name, proc, c.Image, proc)
	}
	return filepath.Join(root(t), "bin", proc)
}

func tagOf(image string) string { return image[strings.LastIndex(image, ":")+1:] }

func containerPort(c corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

// checkProbe wants probe p to GET path on the container port named
// admin, which must be the config's admin listener.
func checkProbe(t *testing.T, where string, p *corev1.Probe, path string, c corev1.Container, adminAddr string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: no HTTP probe for %s", where, path)
		return
	}
	if p.HTTPGet.Path != path {
		t.Errorf("%s: probe path %s, want %s", where, p.HTTPGet.Path, path)
	}
	port := p.HTTPGet.Port.IntVal
	if p.HTTPGet.Port.Type == intstr.String {
		var ok bool
		if port, ok = containerPort(c, p.HTTPGet.Port.StrVal); !ok {
			t.Errorf("%s: probe port %q is no container port", where, p.HTTPGet.Port.StrVal)
		}
	}
	if fmt.Sprint(port) != portOfAddr(adminAddr) {
		t.Errorf("%s: %s probe on port %d, the admin listener is %s", where, path, port, adminAddr)
	}
}

func portOfAddr(addr string) string { return addr[strings.LastIndex(addr, ":")+1:] }

// checkRendered holds a rendering to our own rules: every listener the
// config of each pod enables is a container port of the same number and
// no container port is one it does not bind; probes on the admin port;
// gate and deliver ids unique and stable (the pod's name); the gate's
// grace above its preStop sleep plus shutdown bound; logic leasing its
// machine id; every Service, PDB, HPA and ServiceMonitor selecting what
// exists; Secrets referenced by name and key. It returns the external
// Secret keys the pods reference.
func checkRendered(t *testing.T, r *rendered) []string {
	var external []string
	ids := map[string]string{}
	byComponent := map[string]workload{}
	for _, w := range r.workloads() {
		byComponent[w.pod.Labels["app.kubernetes.io/component"]] = w
	}
	for _, w := range r.workloads() {
		comp := w.pod.Labels["app.kubernetes.io/component"]
		if sel, err := metav1.LabelSelectorAsSelector(w.selector); err != nil || !sel.Matches(labels.Set(w.pod.Labels)) {
			t.Errorf("%s %s: selector does not match its own pods (%v)", w.kind, w.name, err)
		}
		if len(w.pod.Spec.Containers) != 1 {
			t.Fatalf("%s: %d containers, want 1", w.name, len(w.pod.Spec.Containers))
		}
		c := w.pod.Spec.Containers[0]
		for _, pod := range w.podNames() {
			// In a subtest, so the pod's environment is undone before the next.
			t.Run(pod, func(t *testing.T) {
				cfg, ext := podConfig(t, r, w, c, pod)
				external = append(external, ext...)
				var listeners map[string]string // container port name -> config address
				var id string
				switch comp {
				case "gate":
					g := cfg.Gate
					listeners = map[string]string{"tcp": g.TCPAddr, "push": g.PushAddr, "admin": g.AdminAddr}
					if g.WSAddr != "" {
						listeners["ws"] = g.WSAddr
					}
					if g.TLSEnabled() {
						listeners["tls"] = g.TLSAddr
						if g.WSSAddr != "" {
							listeners["wss"] = g.WSSAddr
						}
					}
					id = "gate " + g.ID
					if !w.stable || g.ID != pod {
						t.Errorf("gate.id %q, want the stable pod name %q", g.ID, pod)
					}
					if want := "10.0.0.7:" + portOfAddr(g.PushAddr); g.PushAdvertise != want {
						t.Errorf("gate.push_advertise %q, want the pod's IP and push port %q", g.PushAdvertise, want)
					}
					checkGateShutdown(t, w, cfg)
					for _, la := range g.LogicAddrs {
						checkNamesLogic(t, r, byComponent, la)
					}
				case "logic":
					l := cfg.Logic
					listeners = map[string]string{"grpc": l.GRPCAddr, "http": l.HTTPAddr, "admin": l.AdminAddr}
					if l.MachineID != -1 {
						t.Errorf("logic.machine_id %d: identical replicas must lease theirs (-1)", l.MachineID)
					}
				case "deliver":
					listeners = map[string]string{"admin": cfg.Deliver.AdminAddr}
					id = "deliver " + cfg.Deliver.ID
					for _, la := range cfg.Deliver.LogicAddrs {
						checkNamesLogic(t, r, byComponent, la)
					}
					if !w.stable || cfg.Deliver.ID != pod {
						t.Errorf("deliver.id %q, want the stable pod name %q", cfg.Deliver.ID, pod)
					}
				default:
					t.Fatalf("workload %s: component %q", w.name, comp)
				}
				if id != "" {
					if other, ok := ids[id]; ok {
						t.Errorf("%s also in pod %s", id, other)
					}
					ids[id] = pod
				}
				for name, addr := range listeners {
					if p, ok := containerPort(c, name); !ok || fmt.Sprint(p) != portOfAddr(addr) {
						t.Errorf("config listens on %s (%s); container port %q is %d", addr, name, name, p)
					}
				}
				for _, p := range c.Ports {
					if _, ok := listeners[p.Name]; !ok {
						t.Errorf("container port %s (%d) is no listener of the config", p.Name, p.ContainerPort)
					}
				}
				checkProbe(t, w.name+" readiness", c.ReadinessProbe, "/readyz", c, listeners["admin"])
				checkProbe(t, w.name+" liveness", c.LivenessProbe, "/healthz", c, listeners["admin"])
				for _, ic := range w.pod.Spec.InitContainers {
					_, ext := podConfig(t, r, w, ic, pod)
					external = append(external, ext...)
					imageBinary(t, ic)
				}
				imageBinary(t, c)
			})
		}
	}
	for _, comp := range []string{"gate", "logic", "deliver"} {
		if _, ok := byComponent[comp]; !ok {
			t.Errorf("no %s workload rendered", comp)
		}
	}
	checkServices(t, r)
	checkPDBs(t, r)
	for _, h := range r.hpas {
		w, ok := byComponent["logic"]
		if !ok || h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != w.name {
			t.Errorf("HPA %s scales %s %s, not the logic Deployment", h.Name, h.Spec.ScaleTargetRef.Kind, h.Spec.ScaleTargetRef.Name)
		}
	}
	checkServiceMonitors(t, r)
	return external
}

// checkGateShutdown wants a preStop sleep and a grace period that covers
// it plus the gate's shutdown bound (gate Server.ShutdownBound) and 10 s,
// as the systemd unit's TimeoutStopSec does.
func checkGateShutdown(t *testing.T, w workload, cfg *config.Config) {
	c := w.pod.Spec.Containers[0]
	var preStop time.Duration
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil {
		t.Errorf("gate: no preStop sleep (the pod must leave the endpoints before the KICKs)")
	} else {
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	bound := cfg.Gate.ShutdownKickWindow + cfg.Gate.DrainTimeout + cfg.Gate.WriteTimeout + 5*time.Second
	if w.pod.Spec.TerminationGracePeriodSeconds == nil {
		t.Fatalf("gate: no terminationGracePeriodSeconds")
	}
	grace := time.Duration(*w.pod.Spec.TerminationGracePeriodSeconds) * time.Second
	if grace < preStop+bound+10*time.Second {
		t.Errorf("gate: grace %v, want at least preStop %v + shutdown bound %v + 10s", grace, preStop, bound)
	}
}

// checkNamesLogic wants addr to be the logic Service's name and gRPC port.
func checkNamesLogic(t *testing.T, r *rendered, byComponent map[string]workload, addr string) {
	host, port := addr[:strings.LastIndex(addr, ":")], portOfAddr(addr)
	for _, s := range r.services {
		if s.Name != host || s.Spec.ClusterIP == corev1.ClusterIPNone {
			continue
		}
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(byComponent["logic"].pod.Labels)) {
			t.Errorf("logic address %s: Service %s does not select logic", addr, s.Name)
		}
		for _, p := range s.Spec.Ports {
			if fmt.Sprint(p.Port) == port && p.TargetPort.StrVal == "grpc" {
				return
			}
		}
		t.Errorf("logic address %s: Service %s has no port %s to grpc", addr, s.Name, port)
		return
	}
	t.Errorf("logic address %s names no rendered ClusterIP Service", addr)
}

// checkServices wants every Service to select the pods of exactly one
// workload, and each target port to name one of its container ports.
func checkServices(t *testing.T, r *rendered) {
	for _, s := range r.services {
		var matched []workload
		for _, w := range r.workloads() {
			if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(w.pod.Labels)) {
				matched = append(matched, w)
			}
		}
		if len(matched) != 1 {
			t.Errorf("Service %s selects %d workloads, want 1", s.Name, len(matched))
			continue
		}
		c := matched[0].pod.Spec.Containers[0]
		for _, p := range s.Spec.Ports {
			if p.TargetPort.Type != intstr.String {
				t.Errorf("Service %s port %s: target %v, want a container port's name", s.Name, p.Name, p.TargetPort)
				continue
			}
			cp, ok := containerPort(c, p.TargetPort.StrVal)
			if !ok {
				t.Errorf("Service %s port %s: target %s is no container port of %s", s.Name, p.Name, p.TargetPort.StrVal, matched[0].name)
			} else if cp != p.Port {
				t.Errorf("Service %s port %s: %d, the container's is %d", s.Name, p.Name, p.Port, cp)
			}
		}
	}
	for _, ss := range r.statefulSets {
		found := false
		for _, s := range r.services {
			found = found || (s.Name == ss.Spec.ServiceName && s.Spec.ClusterIP == corev1.ClusterIPNone)
		}
		if !found {
			t.Errorf("StatefulSet %s: serviceName %q is no rendered headless Service", ss.Name, ss.Spec.ServiceName)
		}
	}
}

// checkPDBs wants one PodDisruptionBudget per workload, selecting it.
func checkPDBs(t *testing.T, r *rendered) {
	for _, w := range r.workloads() {
		n := 0
		for _, p := range r.pdbs {
			sel, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err == nil && sel.Matches(labels.Set(w.pod.Labels)) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d PodDisruptionBudgets select it, want 1", w.name, n)
		}
	}
}

// checkServiceMonitors wants each ServiceMonitor's endpoints to name a
// port of every Service it selects, and those to reach the admin port of
// gate, logic and deliver.
func checkServiceMonitors(t *testing.T, r *rendered) {
	for _, sm := range r.serviceMonitors {
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil {
			t.Fatal(err)
		}
		covered := map[string]bool{}
		for _, s := range r.services {
			if !sel.Matches(labels.Set(s.Labels)) {
				continue
			}
			for _, ep := range sm.Spec.Endpoints {
				found := false
				for _, p := range s.Spec.Ports {
					found = found || p.Name == ep.Port
				}
				if !found {
					t.Errorf("ServiceMonitor %s: Service %s has no port %q", sm.Name, s.Name, ep.Port)
				}
				if ep.Port == "admin" {
					covered[s.Labels["app.kubernetes.io/component"]] = true
				}
			}
		}
		for _, comp := range []string{"gate", "logic", "deliver"} {
			if !covered[comp] {
				t.Errorf("ServiceMonitor %s scrapes no admin port of %s", sm.Name, comp)
			}
		}
	}
}

// TestHelmChartRendersValidObjects renders the chart with the defaults
// and with every optional part on, decodes every document strictly into
// the Kubernetes API types and holds it to checkRendered.
func TestHelmChartRendersValidObjects(t *testing.T) {
	t.Run("defaults", func(t *testing.T) {
		r := renderDecoded(t, "-f", valuesFile(t, "default-values.yaml"))
		if len(r.secrets) != 1 || len(r.hpas) != 1 || len(r.serviceMonitors) != 0 {
			t.Errorf("defaults: %d Secrets, %d HPAs, %d ServiceMonitors; want 1, 1, 0", len(r.secrets), len(r.hpas), len(r.serviceMonitors))
		}
		if ext := checkRendered(t, r); len(ext) > 0 {
			t.Errorf("pods reference Secrets the chart does not render: %v", ext)
		}
		dsn := r.secretValues()[releaseName+"-secrets"]["IM_LOGIC_MYSQL_DSN"]
		if want := "spark:helm-mysql-password@tcp(mysql.db.svc:3306)/spark_im?parseTime=true&loc=UTC"; dsn != want {
			t.Errorf("DSN %q, want %q", dsn, want)
		}
	})
	t.Run("strict decoding refuses an unknown field", func(t *testing.T) {
		out, err := renderChart(t, "-f", valuesFile(t, "default-values.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		bad := bytes.Replace(out, []byte("terminationGracePeriodSeconds:"), []byte("terminationGracePeriodSecond:"), 1)
		if bytes.Equal(bad, out) {
			t.Fatal("no terminationGracePeriodSeconds in the rendering")
		}
		if _, err := decodeRendered(bad); err == nil || !strings.Contains(err.Error(), "terminationGracePeriodSecond") {
			t.Fatalf("a misspelt field decoded: %v", err)
		}
	})
	t.Run("full", func(t *testing.T) {
		r := renderDecoded(t, "-f", valuesFile(t, "full-values.yaml"))
		if len(r.secrets) != 0 || len(r.hpas) != 0 || len(r.serviceMonitors) != 1 {
			t.Errorf("full: %d Secrets, %d HPAs, %d ServiceMonitors; want 0, 0, 1", len(r.secrets), len(r.hpas), len(r.serviceMonitors))
		}
		for _, ref := range checkRendered(t, r) {
			if !strings.HasPrefix(ref, "spark-secrets/") {
				t.Errorf("pods reference %s, not secrets.existingSecret", ref)
			}
		}
		gate := r.workload(t, "gate")
		cm := r.configMaps[0].Data["im.yaml"]
		for _, want := range []string{"proxy_protocol: true", "10.0.0.0/8", "tls_cert_file: /etc/spark-tls/tls.crt",
			"wss_addr: 0.0.0.0:8444", "cluster: true", "p2p_policy: friends_only"} {
			if !strings.Contains(cm, want) {
				t.Errorf("full: im.yaml lacks %q:\n%s", want, cm)
			}
		}
		if gate.replicas != 3 {
			t.Errorf("full: %d gates, want 3", gate.replicas)
		}
	})
}

// TestHelmChartRefusesBadValues: values.schema.json and the chart's own
// checks refuse a wrong value with an error naming it, both in a values
// file and with --set, and helm lint --strict refuses one too.
func TestHelmChartRefusesBadValues(t *testing.T) {
	base := valuesFile(t, "default-values.yaml")
	cases := []struct {
		name, values string
		want         string // in the error
	}{
		{"replicas not a number", "gate:\n  replicas: three\n", "/gate/replicas"},
		{"unknown key", "gate:\n  replica: 2\n", "'replica' not allowed"},
		{"bad service type", "gate:\n  service:\n    type: Ingress\n", "/gate/service/type"},
		{"database kind", "database:\n  kind: postgres\n", "/database/kind"},
		{"port out of range", "logic:\n  ports:\n    grpc: 70000\n", "/logic/ports/grpc"},
		{"redis cluster without seeds", "redis:\n  cluster: true\n", "/redis/addrs"},
		{"redis cluster with a db", "redis:\n  cluster: true\n  addrs: [r:6379]\n  db: 2\n", "/redis/db"},
		{"proxy protocol without trusted CIDRs", "gate:\n  proxyProtocol:\n    enabled: true\n", "/gate/proxyProtocol/trustedCIDRs"},
		{"grace below the shutdown bound", "gate:\n  terminationGracePeriodSeconds: 30\n", "terminationGracePeriodSeconds (30) must be at least"},
		{"no JWT secret", "secrets:\n  jwtSecret: \"\"\n", "secrets.jwtSecret is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := filepath.Join(t.TempDir(), "values.yaml")
			if err := os.WriteFile(f, []byte(tc.values), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := renderChart(t, "-f", base, "-f", f)
			if err == nil {
				t.Fatalf("rendered with %q:\n%s", tc.values, out)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error does not name %q: %v", tc.want, err)
			}
			t.Logf("refused: %v", err)
		})
	}
	t.Run("--set", func(t *testing.T) {
		t.Parallel()
		if _, err := renderChart(t, "-f", base, "--set", "gate.replicas=three"); err == nil || !strings.Contains(err.Error(), "/gate/replicas") {
			t.Fatalf("--set gate.replicas=three: %v", err)
		}
	})
	t.Run("lint", func(t *testing.T) {
		t.Parallel()
		if _, err := helm(t, "lint", "--strict", chartDir(t), "-f", base, "--set", "gate.replicas=three"); err == nil || !strings.Contains(err.Error(), "/gate/replicas") {
			t.Fatalf("helm lint --strict with gate.replicas=three: %v", err)
		}
	})
}

// TestHelmChartConfigRunsACluster starts the real binaries (make build)
// with exactly what the chart renders for its pods: each container's
// command with the rendered ConfigMap at its mount, and its environment
// with the pod's name, the rendered Secret and $(VAR) references
// resolved as Kubernetes does; logic's migrate init container first.
// One logic and one deliver pod (their replicas are alike) and both
// gates, then the smoke session (smokeCluster, which says what it
// overrides: listener ports, MySQL DSN, Redis address).
func TestHelmChartConfigRunsACluster(t *testing.T) {
	r := renderDecoded(t, "-f", valuesFile(t, "default-values.yaml"))
	proc := func(w workload, c corev1.Container, pod, role string, oneshot bool) smokeProc {
		env, ext, err := podEnv(r, c, pod, "127.0.0.1")
		if err != nil || len(ext) > 0 {
			t.Fatalf("%s/%s: %v %v", pod, c.Name, err, ext)
		}
		p := smokeProc{name: pod + "/" + c.Name, role: role, bin: imageBinary(t, c),
			args: containerArgs(t, r, w, c), env: env, oneshot: oneshot}
		if role == "gate" {
			p.gateID = pod
		}
		return p
	}
	logic := r.workload(t, "logic")
	deliver := r.workload(t, "deliver")
	gate := r.workload(t, "gate")
	var procs []smokeProc
	for _, ic := range logic.pod.Spec.InitContainers {
		procs = append(procs, proc(logic, ic, logic.podNames()[0], ic.Name, true))
	}
	procs = append(procs, proc(logic, logic.pod.Spec.Containers[0], logic.podNames()[0], "logic", false))
	procs = append(procs, proc(deliver, deliver.pod.Spec.Containers[0], deliver.podNames()[0], "deliver", false))
	for _, pod := range gate.podNames() {
		procs = append(procs, proc(gate, gate.pod.Spec.Containers[0], pod, "gate", false))
	}
	smokeCluster(t, procs)
}
