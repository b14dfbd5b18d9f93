package configs

import (
	"os"
	"path/filepath"
	"testing"
)

// exampleEnv holds every variable the example configs reference; a new
// reference must be added here, so the test notices it.
var exampleEnv = map[string]string{
	"GITHUB_TOKEN": "ghp_example",
	"PROJECT_DIR":  "/src/project",
	"HOME":         "/home/me",
	"CI_TOKEN":     "ci-example-token",
	"DOCS_TOKEN":   "docs-example-token",
	"TICKETS_KEY":  "tickets-example-key",
	// deploy/viewmux.toml
	"VIEWMUX_REPLICA_ID": "viewmux-0",
	"VIEWMUX_TOKEN":      "fleet-example-token",
	"VIEWMUX_STATE_URL":  "redis://viewmux:example-password@redis.viewmux.svc.cluster.local:6379/0",
	"VIEWMUX_STATE_KEY":  "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
}

func TestExamples(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join("examples", "*.toml"))
	deploy, _ := filepath.Glob(filepath.Join("examples", "deploy", "*.toml"))
	paths = append(paths, deploy...)
	if err != nil || len(paths) < 4 {
		t.Fatalf("want at least 4 examples, got %v, %v", paths, err)
	}
	for _, path := range paths {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := Parse(path, data, env(exampleEnv))
			if err != nil {
				t.Fatalf("example does not parse:\n%v", err)
			}
			if len(cfg.Upstreams) == 0 || len(cfg.Profiles) == 0 {
				t.Errorf("example has %d upstreams and %d profiles", len(cfg.Upstreams), len(cfg.Profiles))
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	paths, _ := filepath.Glob(filepath.Join("examples", "*.toml"))
	for _, p := range paths {
		if data, err := os.ReadFile(p); err == nil {
			f.Add(data)
		}
	}
	f.Add(Quickstart())
	f.Add([]byte("[upstreams.x]\ncommand = \"${A:-b}\"\ndeny = [\"[\"]\n[[auth.tokens]]\n"))
	f.Add([]byte("[profiles.p]\nread_only = \"yes\"\n[[profiles.p.call_rules]]\nargs = [1]\n[upstreams.x]\ncommand = 7\nenv = []\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse("fuzz.toml", data, env(exampleEnv))
		if (cfg == nil) == (err == nil) {
			t.Fatalf("Parse returned config %v and error %v", cfg, err)
		}
		if cfg != nil {
			for name := range cfg.Profiles {
				if len(cfg.Chain(name)) > len(cfg.Profiles) {
					t.Fatalf("Chain(%q) is longer than the profile count", name)
				}
			}
		}
	})
}
