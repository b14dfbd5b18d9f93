package configs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// yamlBlock returns the literal block scalar "key: |" of a YAML file, with
// its indentation removed: enough YAML to read a ConfigMap's data without a
// YAML library.
func yamlBlock(t *testing.T, yaml, key string) string {
	t.Helper()
	lines := strings.SplitAfter(yaml, "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != key+": |" {
			continue
		}
		indent := len(l) - len(strings.TrimLeft(l, " ")) + 2
		var b strings.Builder
		for _, l := range lines[i+1:] {
			if strings.TrimSpace(l) != "" && len(l)-len(strings.TrimLeft(l, " ")) < indent {
				break
			}
			b.WriteString(strings.TrimPrefix(l, strings.Repeat(" ", indent)))
		}
		// A literal block keeps one final newline ("|" clips the rest).
		return strings.TrimRight(b.String(), "\n") + "\n"
	}
	t.Fatalf("no %q block", key)
	return ""
}

// TestDeployExample checks the fleet example: the replica config parses,
// takes its replica_id from the environment as the StatefulSet sets it,
// and is the config the Kubernetes manifest's ConfigMap carries.
func TestDeployExample(t *testing.T) {
	dir := filepath.Join("examples", "deploy")
	toml, err := os.ReadFile(filepath.Join(dir, "viewmux.toml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Parse("viewmux.toml", toml, env(map[string]string{"VIEWMUX_REPLICA_ID": "viewmux-1", "VIEWMUX_TOKEN": "x"}))
	if err != nil {
		t.Fatalf("deploy/viewmux.toml does not parse:\n%v", err)
	}
	if cfg.Server.ReplicaID != "viewmux-1" {
		t.Errorf("replica_id = %q, want the pod name viewmux-1", cfg.Server.ReplicaID)
	}
	if _, err := Parse("viewmux.toml", toml, env(map[string]string{"VIEWMUX_REPLICA_ID": "Viewmux_1", "VIEWMUX_TOKEN": "x"})); err == nil || !strings.Contains(err.Error(), "viewmux.toml:13: server.replica_id") {
		t.Errorf("a pod name that is no replica_id: %v, want the error at viewmux.toml:13", err)
	}
	manifest, err := os.ReadFile(filepath.Join(dir, "k8s.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if got := yamlBlock(t, string(manifest), "viewmux.toml"); got != string(toml) {
		t.Errorf("the ConfigMap in k8s.yaml is not deploy/viewmux.toml:\n%s", got)
	}
	for _, want := range []string{"path: /readyz", "path: /healthz", "fieldPath: metadata.name", "clusterIP: None", "serviceName: viewmux-replicas"} {
		if !strings.Contains(string(manifest), want) {
			t.Errorf("k8s.yaml has no %q", want)
		}
	}
}
