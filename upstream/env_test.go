package upstream

import (
	"slices"
	"testing"

	"github.com/viewmux/viewmux/configs"
)

// TestChildEnv checks what a stdio child gets of viewmux's environment.
func TestChildEnv(t *testing.T) {
	environ := []string{
		"HOME=/home/u", "PATH=/bin", "USER=u", "TERM=xterm", "SHELL=/bin/sh", "LOGNAME=u",
		"VIEWMUX_TOKEN=secret-token", "GITHUB_TOKEN=ghp_other", "AWS_REGION=eu", "AWS_SECRET=aws",
		"AWSX=no", "LANG=C", "BASH_FUNC_f%%=() { :; }", "TERM_PROGRAM=x", "EMPTY=",
	}
	tests := []struct {
		name    string
		goos    string
		inherit []string
		env     map[string]string
		environ []string // nil = environ
		want    []string
	}{
		{name: "only the fixed variables", goos: "linux",
			want: []string{"HOME=/home/u", "PATH=/bin", "USER=u", "TERM=xterm", "SHELL=/bin/sh", "LOGNAME=u"}},
		{name: "names and prefixes", goos: "linux", inherit: []string{"LANG", "AWS_*", "EMPTY"},
			want: []string{"HOME=/home/u", "PATH=/bin", "USER=u", "TERM=xterm", "SHELL=/bin/sh", "LOGNAME=u", "AWS_REGION=eu", "AWS_SECRET=aws", "LANG=C", "EMPTY="}},
		{name: "env wins", goos: "linux", inherit: []string{"LANG"}, env: map[string]string{"LANG": "fr", "PATH": "/opt", "OWN": "1"},
			want: []string{"HOME=/home/u", "USER=u", "TERM=xterm", "SHELL=/bin/sh", "LOGNAME=u", "LANG=fr", "OWN=1", "PATH=/opt"}},
		{name: "a fixed variable holding a shell function is dropped", goos: "linux", environ: []string{"PATH=/bin", "SHELL=() { evil; }"},
			want: []string{"PATH=/bin"}},
		{name: "names are exact on unix", goos: "linux", inherit: []string{"lang"}, environ: []string{"LANG=C", "path=/x"},
			want: nil},
		{name: "windows list, any case", goos: "windows", inherit: []string{"aws_*"},
			environ: []string{"Path=C:\\bin", "SystemRoot=C:\\Windows", "HOME=/h", "AWS_REGION=eu", "SECRET=s"},
			want:    []string{"Path=C:\\bin", "SystemRoot=C:\\Windows", "AWS_REGION=eu"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := tt.environ
			if in == nil {
				in = environ
			}
			got := childEnv(in, tt.goos, &configs.Upstream{Name: "u", InheritEnv: tt.inherit, Env: tt.env})
			if !slices.Equal(got, tt.want) {
				t.Errorf("childEnv =\n%q\nwant\n%q", got, tt.want)
			}
		})
	}
}
