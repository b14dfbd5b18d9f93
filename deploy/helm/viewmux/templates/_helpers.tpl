{{/* The base name of every object: the release name. Pod names
(<name>-<n>) are replica ids, at most 32 characters. */}}
{{- define "viewmux.name" -}}
{{- if gt (len .Release.Name) 28 -}}
{{- fail (printf "release name %q is longer than 28 characters: pod names (<release>-<n>) are viewmux replica ids, at most 32" .Release.Name) -}}
{{- end -}}
{{- .Release.Name -}}
{{- end -}}

{{- define "viewmux.labels" -}}
app.kubernetes.io/name: viewmux
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "viewmux.selector" -}}
app.kubernetes.io/name: viewmux
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "viewmux.routerSelector" -}}
app.kubernetes.io/name: viewmux-router
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}
