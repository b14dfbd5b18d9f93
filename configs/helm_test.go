package configs

import (
	"bytes"
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
