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

{{/* The Secret holding the state store's url and encryption key: the
user's state.existingSecret, else the chart's own when state.url is set;
"" when state is per replica (the files engine). */}}
{{- define "viewmux.stateSecret" -}}
{{- if .Values.state.existingSecret -}}
{{- .Values.state.existingSecret -}}
{{- else if .Values.state.url -}}
{{- include "viewmux.name" . }}-state
{{- end -}}
{{- end -}}

{{/* Refuses values that would deploy something other than what they
say. No message repeats state.url or the key: they are secrets. */}}
{{- define "viewmux.check" -}}
{{- $replicas := int .Values.replicas -}}
{{- $shared := include "viewmux.stateSecret" . -}}
{{- if lt $replicas 1 -}}
{{- fail (printf "replicas is %d: want at least 1" $replicas) -}}
{{- end -}}
{{- if and .Values.state.existingSecret (or .Values.state.url .Values.state.encryptionKey) -}}
{{- fail "set state.existingSecret or state.url (with state.encryptionKey), not both: the url and key come from one Secret" -}}
{{- end -}}
{{- if and .Values.state.encryptionKey (not .Values.state.url) (not .Values.state.existingSecret) -}}
{{- fail "state.encryptionKey seals logins in a shared store: it needs state.url" -}}
{{- end -}}
{{- if and .Values.state.encryptionKey (not (regexMatch "^[0-9a-fA-F]{64}$" .Values.state.encryptionKey)) -}}
{{- fail "state.encryptionKey must be 64 hex characters (32 bytes), e.g. the output of `openssl rand -hex 32`" -}}
{{- end -}}
{{- if and .Values.state.url (not (or (hasPrefix "redis://" .Values.state.url) (hasPrefix "rediss://" .Values.state.url))) -}}
{{- fail "state.url must be a redis:// or rediss:// URL of a Redis or Valkey server" -}}
{{- end -}}
{{- if and (gt $replicas 1) (not $shared) (not .Values.state.perReplica) -}}
{{- fail (printf "replicas is %d but no shared state store is set: each replica would keep its own pins, logins, connect links, stateless approvals and rate limits, so a pin approved, a login made or a connect link minted on one replica would be missing on the others, and each replica would allow the whole rate limit. Set state.url or state.existingSecret to a Redis or Valkey server (docs/fleet.md), or state.perReplica=true to accept per-replica state" $replicas) -}}
{{- end -}}
{{- if and .Values.persistence.enabled (gt $replicas 1) (not .Values.state.perReplica) -}}
{{- fail (printf "persistence.enabled with replicas %d: each replica would get a disk of its own, which no other replica reads. Use replicas: 1, or a shared store (state.url or state.existingSecret) without persistence, or set state.perReplica=true to accept per-replica state" $replicas) -}}
{{- end -}}
{{- end -}}
