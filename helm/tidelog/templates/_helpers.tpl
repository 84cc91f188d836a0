{{/* Spread a component's pods over nodes: preferred, so a one-node cluster still schedules them all. */}}
{{- define "tidelog.antiAffinity" -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
    - weight: 100
      podAffinityTerm:
        topologyKey: kubernetes.io/hostname
        labelSelector:
          matchLabels: {app.kubernetes.io/name: {{ .name }}, app.kubernetes.io/instance: {{ .release | quote }}}
{{- end }}

{{/* With security on: the flag every service and the operator read their security settings from. */}}
{{- define "tidelog.securityFlag" -}}
{{- if .Values.security.enabled }} --config-file /etc/tidelog/security/security.properties{{ end }}
{{- end }}

{{/* With security on: the component's certificate and the shared security settings, mounted. */}}
{{- define "tidelog.securityMounts" -}}
{{- if .root.Values.security.enabled }}
- {name: tls, mountPath: /etc/tidelog/tls, readOnly: true}
- {name: security, mountPath: /etc/tidelog/security, readOnly: true}
{{- end }}
{{- end }}

{{- define "tidelog.securityVolumes" -}}
{{- if .root.Values.security.enabled }}
- name: tls
  secret: {secretName: {{ .root.Release.Name }}-{{ .component }}-tls}
- name: security
  configMap: {name: {{ .root.Release.Name }}-security}
{{- if has .component (list "controller" "broker" "coordinator" "gateway") }}
- name: etcd-tls
  secret: {secretName: {{ .root.Release.Name }}-{{ .component }}-etcd-tls}
{{- end }}
{{- end }}
{{- end }}

{{/* With security on: a component that uses etcd mounts its client certificate of etcd's CA. */}}
{{- define "tidelog.etcdClientMount" -}}
{{- if .Values.security.enabled }}
- {name: etcd-tls, mountPath: /etc/tidelog/etcd-tls, readOnly: true}
{{- end }}
{{- end }}

{{/* Probes: gRPC health without TLS; a TCP connect when the listener speaks TLS (kubelet's gRPC
probe has no TLS). */}}
{{- define "tidelog.probe" -}}
{{- if .root.Values.security.enabled }}
tcpSocket: {port: {{ .port }}}
{{- else }}
grpc: {port: {{ .port }}}
{{- end }}
{{- end }}

{{/* Pod Security "restricted" (docs/operator.md): every pod runs as the image's non-root user with
the runtime's seccomp profile; every container without privilege escalation or capabilities, on a
read-only root filesystem with an emptyDir at /tmp for what Python and its libraries write there. */}}
{{- define "tidelog.podSecurityContext" -}}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end }}

{{- define "tidelog.containerSecurityContext" -}}
securityContext:
  {{- toYaml .Values.containerSecurityContext | nindent 2 }}
{{- end }}

{{- define "tidelog.tmpMount" -}}
- {name: tmp, mountPath: /tmp}
{{- end }}

{{- define "tidelog.tmpVolume" -}}
- {name: tmp, emptyDir: {sizeLimit: 256Mi}}
{{- end }}

{{/* The certificates command's account: a ServiceAccount and a Role on the release's certificate
Secrets (by name; create cannot be limited by name), bound. */}}
{{- define "tidelog.certificatesAccess" -}}
apiVersion: v1
kind: ServiceAccount
metadata:
  name: {{ .name }}
  {{- with .annotations }}
  annotations: {{- toYaml . | nindent 4 }}
  {{- end }}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .name }}
  {{- with .annotations }}
  annotations: {{- toYaml . | nindent 4 }}
  {{- end }}
rules:
  - apiGroups: [""]
    resources: [secrets]
    verbs: [get, patch]
    resourceNames:
      - {{ .release }}-cluster-ca
      - {{ .release }}-etcd-ca
      - {{ .release }}-etcd-etcd-tls
      {{- range $component := .components }}
      - {{ $.release }}-{{ $component }}-tls
      {{- end }}
      {{- range $client := .etcdClients }}
      - {{ $.release }}-{{ $client }}-etcd-tls
      {{- end }}
  - apiGroups: [""]
    resources: [secrets]
    verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {{ .name }}
  {{- with .annotations }}
  annotations: {{- toYaml . | nindent 4 }}
  {{- end }}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: {{ .name }}}
subjects:
  - {kind: ServiceAccount, name: {{ .name }}, namespace: {{ .namespace }}}
{{- end }}

{{/* The pod that runs tidelog-cluster-certificates (the install hook's Job and the CronJob). */}}
{{- define "tidelog.certificatesPod" -}}
metadata:
  labels: {app.kubernetes.io/name: tidelog-certificates, app.kubernetes.io/instance: "{{ .root.Release.Name }}"}
spec:
  serviceAccountName: {{ .account }}
  restartPolicy: Never
  {{- include "tidelog.podSecurityContext" .root | nindent 2 }}
  containers:
    - name: certificates
      image: "{{ .root.Values.image.repository }}:{{ .root.Values.image.tag }}"
      imagePullPolicy: {{ .root.Values.image.pullPolicy }}
      {{- include "tidelog.containerSecurityContext" .root | nindent 6 }}
      command:
        - tidelog-cluster-certificates
        - --namespace
        - {{ .root.Release.Namespace }}
        - --release
        - {{ .root.Release.Name }}
        - --components
        - {{ join "," .components }}
        - --etcd-clients
        - {{ join "," .etcdClients }}
      resources:
        requests: {cpu: 10m, memory: 64Mi}
        limits: {memory: 128Mi}
      volumeMounts:
        {{- include "tidelog.tmpMount" .root | nindent 8 }}
  volumes:
    {{- include "tidelog.tmpVolume" .root | nindent 4 }}
{{- end }}

{{/* A component's `config` map (Kafka-named settings; values.schema.json, generated from the
settings registry, checks names and values) as --config flags, which win over --config-file. */}}
{{- define "tidelog.configFlags" -}}
{{- range $name, $value := . }} --config {{ printf "%s=%s" $name (include "tidelog.configValue" $value) | quote }}{{ end }}
{{- end }}

{{/* One setting's value as the registry parses it: whole numbers without an exponent (YAML's
numbers reach templates as floats), lists comma-separated. */}}
{{- define "tidelog.configValue" -}}
{{- if kindIs "float64" . }}{{ if eq . (floor .) }}{{ int64 . }}{{ else }}{{ . }}{{ end }}
{{- else if kindIs "slice" . }}{{ join "," . }}
{{- else }}{{ . }}{{ end }}
{{- end }}
