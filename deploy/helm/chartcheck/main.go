// Command chartcheck reads Kubernetes objects as YAML documents (the output
// of `helm template`) on stdin and decodes each strictly into its
// Kubernetes API type: an unknown field, a value of the wrong type or an
// unknown kind is an error. With -out DIR it writes every ConfigMap's data
// to DIR/<name>/<key>, and it prints one line per object: kind/name.
//
// It is its own module so that the Kubernetes API packages stay out of
// viewmux's go.mod; configs/helm_test.go runs it.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

func main() {
	out := flag.String("out", "", "write each ConfigMap's data under this `DIR`")
	flag.Parse()
	data, err := io.ReadAll(os.Stdin)
	if err != nil {
		fail(err)
	}
	n := 0
	for i, doc := range splitDocuments(data) {
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			fail(fmt.Errorf("document %d: %w", i+1, err))
		}
		if meta.Kind == "" {
			continue // an empty document
		}
		if meta.Metadata.Name == "" {
			fail(fmt.Errorf("document %d (%s): no metadata.name", i+1, meta.Kind))
		}
		var obj any
		switch meta.APIVersion + " " + meta.Kind {
		case "v1 ConfigMap":
			obj = &corev1.ConfigMap{}
		case "v1 Service":
			obj = &corev1.Service{}
		case "v1 Secret":
			obj = &corev1.Secret{}
		case "apps/v1 StatefulSet":
			obj = &appsv1.StatefulSet{}
		case "apps/v1 Deployment":
			obj = &appsv1.Deployment{}
		default:
			fail(fmt.Errorf("document %d: %s %s: not a kind this checker knows", i+1, meta.APIVersion, meta.Kind))
		}
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			fail(fmt.Errorf("%s %s: %w", meta.Kind, meta.Metadata.Name, err))
		}
		if err := check(obj); err != nil {
			fail(fmt.Errorf("%s %s: %w", meta.Kind, meta.Metadata.Name, err))
		}
		if cm, ok := obj.(*corev1.ConfigMap); ok && *out != "" {
			for k, v := range cm.Data {
				p := filepath.Join(*out, cm.Name, k)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					fail(err)
				}
				if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
					fail(err)
				}
			}
		}
		fmt.Printf("%s/%s\n", meta.Kind, meta.Metadata.Name)
		n++
	}
	if n == 0 {
		fail(fmt.Errorf("no objects on stdin"))
	}
}

// check holds what the API server would refuse that strict decoding
// accepts: containers without an image, selectors that do not select their
// own pod template, services without ports.
func check(obj any) error {
	podSpec := func(labels, selector map[string]string, spec corev1.PodSpec) error {
		for k, v := range selector {
			if labels[k] != v {
				return fmt.Errorf("selector %s=%s does not match the pod template's labels %v", k, v, labels)
			}
		}
		if len(spec.Containers) == 0 {
			return fmt.Errorf("no containers")
		}
		for _, c := range spec.Containers {
			if c.Name == "" || c.Image == "" {
				return fmt.Errorf("container %q has no name or image", c.Name)
			}
		}
		return nil
	}
	switch o := obj.(type) {
	case *appsv1.StatefulSet:
		if o.Spec.Selector == nil || o.Spec.ServiceName == "" {
			return fmt.Errorf("needs a selector and a serviceName")
		}
		return podSpec(o.Spec.Template.Labels, o.Spec.Selector.MatchLabels, o.Spec.Template.Spec)
	case *appsv1.Deployment:
		if o.Spec.Selector == nil {
			return fmt.Errorf("needs a selector")
		}
		return podSpec(o.Spec.Template.Labels, o.Spec.Selector.MatchLabels, o.Spec.Template.Spec)
	case *corev1.Service:
		if len(o.Spec.Ports) == 0 {
			return fmt.Errorf("no ports")
		}
	}
	return nil
}

// splitDocuments splits a YAML stream at its "---" lines.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	var cur bytes.Buffer
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		if line := sc.Text(); strings.TrimRight(line, " ") == "---" {
			docs = append(docs, bytes.Clone(cur.Bytes()))
			cur.Reset()
			continue
		}
		cur.Write(sc.Bytes())
		cur.WriteByte('\n')
	}
	return append(docs, cur.Bytes())
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "chartcheck:", err)
	os.Exit(1)
}
