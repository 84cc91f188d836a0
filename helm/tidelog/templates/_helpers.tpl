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
