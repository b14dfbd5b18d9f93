package configs

import (
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// chartDir is the Helm chart, from this package's directory.
var chartDir = filepath.Join("..", "deploy", "helm", "viewmux")

// requireHelm returns the helm binary ($HELM, else helm on PATH). Without
// it the chart tests skip, unless CI=true, where they fail (.ci/run
// installs helm).
func requireHelm(t *testing.T) string {
	t.Helper()
	if h := os.Getenv("HELM"); h != "" {
		return h
	}
	h, err := exec.LookPath("helm")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("CI=true and helm is not installed (.ci/run installs it)")
		}
		t.Skip("helm is not installed; set HELM or put helm on PATH")
	}
	return h
}

// helmTemplate renders the chart; args are extra flags.
func helmTemplate(t *testing.T, helm, release, namespace string, args ...string) ([]byte, error) {
	t.Helper()
	cmd := exec.Command(helm, append([]string{"template", release, chartDir, "--namespace", namespace}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, &exec.ExitError{ProcessState: cmd.ProcessState, Stderr: stderr.Bytes()}
	}
	return out, nil
}

// chartcheck strictly decodes rendered objects into the Kubernetes API
// types (deploy/helm/chartcheck, a module of its own) and writes the
// ConfigMaps' data under dir. It returns the kind/name lines.
func chartcheck(t *testing.T, rendered []byte, dir string) (string, error) {
	t.Helper()
	cmd := exec.Command("go", "-C", filepath.Join("..", "deploy", "helm", "chartcheck"), "run", ".", "-out", dir)
	cmd.Stdin = bytes.NewReader(rendered)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", &chartError{err, stderr.String()}
	}
	return string(out), nil
}

type chartError struct {
	err    error
	stderr string
}

func (e *chartError) Error() string { return e.err.Error() + ": " + e.stderr }

// TestHelmChart renders deploy/helm/viewmux with helm, checks every object
// against the Kubernetes API types, loads the viewmux config it carries, and
// checks that with release and namespace "viewmux" it renders what
// configs/examples/deploy/k8s.yaml holds: the same config, router and image.
func TestHelmChart(t *testing.T) {
	helm := requireHelm(t)
	if out, err := exec.Command(helm, "lint", "--strict", chartDir).CombinedOutput(); err != nil {
		t.Fatalf("helm lint --strict: %v\n%s", err, out)
	}
	rendered, err := helmTemplate(t, helm, "mx", "tools")
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, err.(*exec.ExitError).Stderr)
	}
	dir := t.TempDir()
	objects, err := chartcheck(t, rendered, dir)
	if err != nil {
		t.Fatalf("the rendered chart does not decode strictly:\n%v", err)
	}
	for _, want := range []string{"ConfigMap/mx-config", "ConfigMap/mx-router", "Service/mx-replicas", "Service/mx", "Service/mx-router", "StatefulSet/mx", "Deployment/mx-router"} {
		if !strings.Contains(objects, want+"\n") {
			t.Errorf("helm template renders no %s; got:\n%s", want, objects)
		}
	}

	// The config it mounts loads, with the replica id a pod of this
	// release gets.
	toml, err := os.ReadFile(filepath.Join(dir, "mx-config", "viewmux.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse("mx-config/viewmux.toml", toml, env(map[string]string{"VIEWMUX_REPLICA_ID": "mx-1", "VIEWMUX_TOKEN": "x"}))
	if err != nil {
		t.Fatalf("the chart's config does not load:\n%v", err)
	}
	if cfg.Server.ReplicaID != "mx-1" {
		t.Errorf("replica_id = %q, want the pod name", cfg.Server.ReplicaID)
	}
	router, err := os.ReadFile(filepath.Join(dir, "mx-router", "nginx.conf"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`~^(?<replica>mx-[0-9]+)\.  $replica.mx-replicas.tools.svc.cluster.local:8931;`, "server mx.tools.svc.cluster.local:8931;"} {
		if !strings.Contains(string(router), want) {
			t.Errorf("the router does not route to this release's pods: no %q in\n%s", want, router)
		}
	}

	// The chart's default config is the fleet example, byte for byte.
	example, err := os.ReadFile(filepath.Join("examples", "deploy", "viewmux.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if files, _ := os.ReadFile(filepath.Join(chartDir, "files", "viewmux.toml")); !bytes.Equal(files, example) {
		t.Error("deploy/helm/viewmux/files/viewmux.toml is not configs/examples/deploy/viewmux.toml; copy it")
	}

	// Named like k8s.yaml, the chart renders k8s.yaml's router and image.
	same, err := helmTemplate(t, helm, "viewmux", "viewmux")
	if err != nil {
		t.Fatal(err)
	}
	dir2 := t.TempDir()
	if _, err := chartcheck(t, same, dir2); err != nil {
		t.Fatal(err)
	}
	manifest, err := os.ReadFile(filepath.Join("examples", "deploy", "k8s.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir2, "viewmux-router", "nginx.conf"))
	if want := yamlBlock(t, string(manifest), "nginx.conf"); string(got) != want {
		t.Errorf("the chart's router for release viewmux differs from k8s.yaml's:\n%s", got)
	}
	imageRE := regexp.MustCompile(`(?m)^\s+image: "?([^":\s]+)`)
	k8sImage := imageRE.FindStringSubmatch(string(manifest))
	chartImage := imageRE.FindStringSubmatch(string(same[bytes.Index(same, []byte("kind: StatefulSet")):]))
	if k8sImage == nil || chartImage == nil || k8sImage[1] != chartImage[1] {
		t.Errorf("k8s.yaml names image %v, the chart %v: they must agree", k8sImage, chartImage)
	}
	makefile, _ := os.ReadFile(filepath.Join("..", "Makefile"))
	if k8sImage != nil && !regexp.MustCompile(`(?m)^IMAGE\s+\?=\s+`+regexp.QuoteMeta(k8sImage[1])+`$`).Match(makefile) {
		t.Errorf("make image does not build %s, the image k8s.yaml and the chart name", k8sImage[1])
	}

	// A release name too long for a replica id is refused at render time.
	if _, err := helmTemplate(t, helm, strings.Repeat("a", 29), "tools"); err == nil {
		t.Error("a 29-character release renders; its pod names cannot be replica ids")
	}
}

// TestHelmChartcheckIsStrict: the validator refuses what the API server
// would, so TestHelmChart can fail.
func TestHelmChartcheckIsStrict(t *testing.T) {
	for name, doc := range map[string]string{
		"unknown field": "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: x\nspec:\n  replicaz: 2\n",
		"wrong type":    "apiVersion: v1\nkind: Service\nmetadata:\n  name: x\nspec:\n  ports: 8931\n",
		"unknown kind":  "apiVersion: v1\nkind: Servce\nmetadata:\n  name: x\n",
		"no image":      "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: x\nspec:\n  selector:\n    matchLabels: {a: b}\n  template:\n    metadata:\n      labels: {a: b}\n    spec:\n      containers:\n        - name: c\n",
	} {
		if _, err := chartcheck(t, []byte(doc), t.TempDir()); err == nil {
			t.Errorf("%s: chartcheck accepted\n%s", name, doc)
		}
	}
}

// renderedDoc returns the rendered object of kind named name, its comment
// lines left out; "" when there is none.
func renderedDoc(rendered, kind, name string) string {
	for _, doc := range strings.Split(rendered, "\n---\n") {
		var b strings.Builder
		for _, l := range strings.SplitAfter(doc, "\n") {
			if !strings.HasPrefix(strings.TrimSpace(l), "#") {
				b.WriteString(l)
			}
		}
		d := strings.TrimSuffix(b.String(), "\n") + "\n"
		if strings.Contains(d, "\nkind: "+kind+"\n") && strings.Contains(d, "\n  name: "+name+"\n") {
			return d
		}
	}
	return ""
}

// secretEnvRE matches an environment variable taken from a Secret's key,
// as the chart writes it: name, valueFrom, secretKeyRef, name, key.
func secretEnvRE(env, secret, key string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^\s+- name: ` + env + `\n\s+valueFrom:\n\s+secretKeyRef:\n\s+name: ` + regexp.QuoteMeta(secret) + `\n\s+key: ` + regexp.QuoteMeta(key) + `\n`)
}

// TestHelmChartState: how the chart's values choose the state store, and
// what it refuses. The url and key never reach the ConfigMap, and no
// refusal repeats them.
func TestHelmChartState(t *testing.T) {
	helm := requireHelm(t)
	const (
		password = "s3cr3t-redis-pw"
		url      = "rediss://viewmux:" + password + "@redis.tools.svc.cluster.local:6380/0"
		key      = testKey
	)
	// render renders release mx in namespace tools with values, checks
	// every object strictly, and returns the rendered text and the
	// directory holding the ConfigMaps' data.
	render := func(t *testing.T, values ...string) (string, string) {
		t.Helper()
		var args []string
		for _, v := range values {
			args = append(args, "--set", v)
		}
		out, err := helmTemplate(t, helm, "mx", "tools", args...)
		if err != nil {
			t.Fatalf("helm template %v: %v\n%s", values, err, err.(*exec.ExitError).Stderr)
		}
		dir := t.TempDir()
		if _, err := chartcheck(t, out, dir); err != nil {
			t.Fatalf("the rendered chart does not decode strictly:\n%v", err)
		}
		return string(out), dir
	}
	// refused renders values, wants helm to refuse, and returns its
	// message.
	refused := func(t *testing.T, values ...string) string {
		t.Helper()
		var args []string
		for _, v := range values {
			args = append(args, "--set", v)
		}
		out, err := helmTemplate(t, helm, "mx", "tools", args...)
		if err == nil {
			t.Fatalf("helm template %v rendered; want a refusal:\n%s", values, out)
		}
		msg := string(err.(*exec.ExitError).Stderr)
		for _, secret := range []string{password, key, "redis.tools"} {
			if strings.Contains(msg, secret) {
				t.Errorf("the refusal repeats a secret (%q):\n%s", secret, msg)
			}
		}
		return msg
	}
	// config loads the rendered viewmux config with vars.
	config := func(t *testing.T, dir string, vars map[string]string) *Config {
		t.Helper()
		toml, err := os.ReadFile(filepath.Join(dir, "mx-config", "viewmux.toml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{password, key, "redis"} {
			if strings.Contains(strings.ReplaceAll(string(toml), "Redis or Valkey", ""), secret) {
				t.Errorf("the ConfigMap holds %q:\n%s", secret, toml)
			}
		}
		all := map[string]string{"VIEWMUX_REPLICA_ID": "mx-0", "VIEWMUX_TOKEN": "x"}
		maps.Copy(all, vars)
		cfg, err := Parse("mx-config/viewmux.toml", toml, env(all))
		if err != nil {
			t.Fatalf("the chart's config does not load:\n%v", err)
		}
		return cfg
	}
	refusal := []string{"pins", "logins", "connect", "approvals", "rate", "state.url", "state.existingSecret", "state.perReplica=true", "Redis or Valkey"}

	t.Run("default: one replica, files engine", func(t *testing.T) {
		out, dir := render(t)
		sts := renderedDoc(out, "StatefulSet", "mx")
		for _, want := range []string{"\n  replicas: 1\n", "- name: state\n          emptyDir: {}\n", "mountPath: /var/lib/viewmux\n"} {
			if !strings.Contains(sts, want) {
				t.Errorf("the StatefulSet has no %q:\n%s", want, sts)
			}
		}
		for _, not := range []string{"VIEWMUX_STATE_URL", "volumeClaimTemplates", "fsGroup"} {
			if strings.Contains(sts, not) {
				t.Errorf("the StatefulSet has %q by default:\n%s", not, sts)
			}
		}
		if s := renderedDoc(out, "Secret", "mx-state"); s != "" {
			t.Errorf("a Secret is rendered without state.url:\n%s", s)
		}
		cfg := config(t, dir, nil)
		if cfg.State.URL != "" || cfg.Server.StateDir != "/var/lib/viewmux/state" {
			t.Errorf("state %q in %q, want the files engine in /var/lib/viewmux/state", cfg.State.URL, cfg.Server.StateDir)
		}
	})

	t.Run("replicas=2 without a store is refused", func(t *testing.T) {
		msg := refused(t, "replicas=2")
		for _, want := range refusal {
			if !strings.Contains(msg, want) {
				t.Errorf("the refusal does not say %q:\n%s", want, msg)
			}
		}
	})

	t.Run("replicas=2 with state.existingSecret", func(t *testing.T) {
		out, dir := render(t, "replicas=2", "state.existingSecret=viewmux-state")
		sts := renderedDoc(out, "StatefulSet", "mx")
		if !strings.Contains(sts, "\n  replicas: 2\n") {
			t.Errorf("the StatefulSet does not run 2 replicas:\n%s", sts)
		}
		if !secretEnvRE("VIEWMUX_STATE_URL", "viewmux-state", "url").MatchString(sts) {
			t.Errorf("VIEWMUX_STATE_URL is not the url of secret viewmux-state:\n%s", sts)
		}
		if !regexp.MustCompile(secretEnvRE("VIEWMUX_STATE_KEY", "viewmux-state", "encryption-key").String() + `\s+optional: true\n`).MatchString(sts) {
			t.Errorf("VIEWMUX_STATE_KEY is not the optional encryption-key of secret viewmux-state:\n%s", sts)
		}
		if s := renderedDoc(out, "Secret", "mx-state"); s != "" {
			t.Errorf("the chart renders a Secret of its own beside state.existingSecret:\n%s", s)
		}
		cfg := config(t, dir, map[string]string{"VIEWMUX_STATE_URL": url, "VIEWMUX_STATE_KEY": key})
		if cfg.State.URL != url || len(cfg.State.EncryptionKey) != 32 {
			t.Errorf("with the Secret's variables the config's store is %q (key of %d bytes), want %q", cfg.State.URL, len(cfg.State.EncryptionKey), url)
		}
		// A Secret without encryption-key: the variable is not set, and
		// the config still loads (its upstreams have no oauth).
		if cfg := config(t, dir, map[string]string{"VIEWMUX_STATE_URL": url}); cfg.State.EncryptionKey != nil {
			t.Errorf("no VIEWMUX_STATE_KEY gives key %v, want none", cfg.State.EncryptionKey)
		}
	})

	t.Run("state.url goes into a Secret", func(t *testing.T) {
		out, _ := render(t, "replicas=3", "state.url="+url, "state.encryptionKey="+key)
		secret := renderedDoc(out, "Secret", "mx-state")
		for _, want := range []string{"\n  url: \"" + url + "\"\n", "\n  encryption-key: \"" + key + "\"\n"} {
			if !strings.Contains(secret, want) {
				t.Errorf("Secret mx-state has no %q:\n%s", want, secret)
			}
		}
		sts := renderedDoc(out, "StatefulSet", "mx")
		if !secretEnvRE("VIEWMUX_STATE_URL", "mx-state", "url").MatchString(sts) || !secretEnvRE("VIEWMUX_STATE_KEY", "mx-state", "encryption-key").MatchString(sts) {
			t.Errorf("the pods do not read the store from Secret mx-state:\n%s", sts)
		}
		for name, doc := range map[string]string{"StatefulSet": sts, "ConfigMap": renderedDoc(out, "ConfigMap", "mx-config")} {
			if strings.Contains(doc, password) || strings.Contains(doc, key) {
				t.Errorf("the %s holds the url or the key:\n%s", name, doc)
			}
		}
		// Without a key, the Secret has none.
		out, _ = render(t, "state.url="+url)
		if secret := renderedDoc(out, "Secret", "mx-state"); !strings.Contains(secret, "url:") || strings.Contains(secret, "encryption-key") {
			t.Errorf("state.url alone:\n%s", secret)
		}
	})

	t.Run("state.perReplica overrides the refusal", func(t *testing.T) {
		out, _ := render(t, "replicas=2", "state.perReplica=true")
		sts := renderedDoc(out, "StatefulSet", "mx")
		if !strings.Contains(sts, "\n  replicas: 2\n") || strings.Contains(sts, "VIEWMUX_STATE_URL") {
			t.Errorf("perReplica: want 2 replicas without a store:\n%s", sts)
		}
	})

	t.Run("persistence", func(t *testing.T) {
		out, _ := render(t, "persistence.enabled=true", "persistence.size=5Gi", "persistence.storageClass=fast-ssd")
		sts := renderedDoc(out, "StatefulSet", "mx")
		claims := regexp.MustCompile(`(?s)\n  volumeClaimTemplates:\n    - metadata:\n        name: state\n.*accessModes: \["ReadWriteOnce"\]\n\s+storageClassName: "fast-ssd"\n\s+resources:\n\s+requests:\n\s+storage: "5Gi"\n`)
		if !claims.MatchString(sts) {
			t.Errorf("no volumeClaimTemplate state of 5Gi on fast-ssd:\n%s", sts)
		}
		if strings.Contains(sts, "emptyDir") || !strings.Contains(sts, "fsGroup: 10001") || !strings.Contains(sts, "- name: state\n              mountPath: /var/lib/viewmux\n") {
			t.Errorf("the claim is not what is mounted at /var/lib/viewmux, writable by the image's group:\n%s", sts)
		}
		out, _ = render(t, "persistence.enabled=true")
		if sts := renderedDoc(out, "StatefulSet", "mx"); strings.Contains(sts, "storageClassName") || !strings.Contains(sts, `storage: "1Gi"`) {
			t.Errorf("persistence by default: want 1Gi of the default StorageClass:\n%s", sts)
		}

		msg := refused(t, "persistence.enabled=true", "replicas=2", "state.existingSecret=viewmux-state")
		for _, want := range []string{"persistence.enabled", "a disk of its own", "state.perReplica=true"} {
			if !strings.Contains(msg, want) {
				t.Errorf("the refusal of persistence with 2 replicas does not say %q:\n%s", want, msg)
			}
		}
		if msg := refused(t, "persistence.enabled=true", "replicas=2"); !strings.Contains(msg, "pins") {
			t.Errorf("2 replicas with persistence and no store: %s", msg)
		}
		out, _ = render(t, "persistence.enabled=true", "replicas=2", "state.perReplica=true")
		if sts := renderedDoc(out, "StatefulSet", "mx"); !strings.Contains(sts, "volumeClaimTemplates") || !strings.Contains(sts, "\n  replicas: 2\n") {
			t.Errorf("perReplica with persistence: want 2 replicas with a claim each:\n%s", sts)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		for _, tt := range []struct {
			values []string
			want   string
		}{
			{[]string{"state.existingSecret=viewmux-state", "state.url=" + url}, "not both"},
			{[]string{"state.url=http://" + password + "@redis.tools:6379"}, "state.url must be a redis:// or rediss:// URL"},
			{[]string{"state.url=" + url, "state.encryptionKey=" + key[:40]}, "state.encryptionKey must be 64 hex characters"},
			{[]string{"state.encryptionKey=" + key}, "state.encryptionKey seals logins in a shared store: it needs state.url"},
			{[]string{"replicas=0"}, "replicas is 0"},
		} {
			if msg := refused(t, tt.values...); !strings.Contains(msg, tt.want) {
				t.Errorf("%v: the refusal does not say %q:\n%s", tt.values, tt.want, msg)
			}
		}
	})
}
