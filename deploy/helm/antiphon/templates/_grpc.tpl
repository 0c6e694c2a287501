{{/* Container ports and gRPC probe handlers of a gRPC component (session, stage0, stage1). */}}
{{- define "antiphon.grpcPorts" -}}
{{- $v := index .root.Values .component -}}
- name: grpc
  containerPort: {{ $v.service.port }}
  protocol: TCP
- name: metrics
  containerPort: {{ $v.service.metricsPort }}
  protocol: TCP
{{- end -}}

{{/* ANTIPHON_LISTEN / ANTIPHON_METRICS_PORT from the component's service ports. */}}
{{- define "antiphon.grpcEnv" -}}
{{- $v := index .root.Values .component -}}
- name: ANTIPHON_LISTEN
  value: {{ printf "0.0.0.0:%d" (int $v.service.port) | quote }}
- name: ANTIPHON_METRICS_PORT
  value: {{ $v.service.metricsPort | quote }}
{{- end -}}

{{/*
A stage worker's environment: the gRPC ports, the Redis of the worker
registry, and the address it advertises there (its pod IP: each pod is
dialled directly, not through the headless Service's name).
*/}}
{{- define "antiphon.workerEnv" -}}
{{- $v := index .root.Values .component -}}
{{ include "antiphon.grpcEnv" . }}
{{ include "antiphon.redisUrlEnv" .root }}
- name: POD_IP
  valueFrom:
    fieldRef:
      fieldPath: status.podIP
- name: ANTIPHON_ADVERTISE_ADDRESS
  value: {{ printf "$(POD_IP):%d" (int $v.service.port) | quote }}
{{- end -}}

{{/* A native gRPC probe handler; service "" asks "alive", the service's name asks "ready". */}}
{{- define "antiphon.grpcCheck" -}}
{{- $v := index .root.Values .component -}}
{{- toJson (dict "grpc" (dict "port" (int $v.service.port) "service" .service)) -}}
{{- end -}}
