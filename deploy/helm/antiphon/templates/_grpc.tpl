{{/*
Worker processes in one pod of a component: stage0's profile.stage0.llm_front_ends
(several stage0 workers on one vLLM engine core, front_ends.py) or
duplex_front_ends (several on one duplex stepper, duplex_front_ends.py), stage1's
profile.stage1.worker_processes (several stage1 workers on one device,
processes.py) or duplex_front_ends (several on one `mimi` stepper,
stage1/duplex_front_ends.py), 1 elsewhere. Worker i listens on the component's port + i and
serves metrics on metricsPort + i.
*/}}
{{- define "antiphon.frontEnds" -}}
{{- if eq .component "stage0" -}}
{{- $s0 := .root.Values.profile.stage0 -}}
{{- max (int ($s0.llm_front_ends | default 1)) (int ($s0.duplex_front_ends | default 1)) -}}
{{- else if eq .component "stage1" -}}
{{- $s1 := .root.Values.profile.stage1 -}}
{{- max (int ($s1.worker_processes | default 1)) (int ($s1.duplex_front_ends | default 1)) -}}
{{- else -}}
1
{{- end -}}
{{- end -}}

{{/* A duplex stepper (stage0's or stage1's duplex_front_ends above 1) serves the
step's metrics after its front ends', at metricsPort + their count: 1 if so, else 0. */}}
{{- define "antiphon.stepperMetrics" -}}
{{- $section := index .root.Values.profile .component | default dict -}}
{{- if and (has .component (list "stage0" "stage1")) (gt (int ($section.duplex_front_ends | default 1)) 1) -}}
1
{{- else -}}
0
{{- end -}}
{{- end -}}

{{/* Container ports of a gRPC component (session, stage0, stage1): front end 0's
are named grpc and metrics, front end i's grpc-i and metrics-i. */}}
{{- define "antiphon.grpcPorts" -}}
{{- $v := index .root.Values .component -}}
{{- range $i := until (int (include "antiphon.frontEnds" .)) }}
- name: {{ include "antiphon.portName" (dict "name" "grpc" "index" $i) }}
  containerPort: {{ add $v.service.port $i }}
  protocol: TCP
- name: {{ include "antiphon.portName" (dict "name" "metrics" "index" $i) }}
  containerPort: {{ add $v.service.metricsPort $i }}
  protocol: TCP
{{- end }}
{{- if eq (include "antiphon.stepperMetrics" .) "1" }}
- name: metrics-stepper
  containerPort: {{ add $v.service.metricsPort (int (include "antiphon.frontEnds" .)) }}
  protocol: TCP
{{- end }}
{{- end -}}

{{- define "antiphon.portName" -}}
{{- if eq (int .index) 0 -}}
{{- .name -}}
{{- else -}}
{{- printf "%s-%d" .name (int .index) -}}
{{- end -}}
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
