{{/*
Names, labels and the pieces every component's templates share.
All names are prefixed "antiphon." so they cannot collide with a parent chart's.
*/}}

{{- define "antiphon.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "antiphon.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* "<fullname>-<component>", e.g. antiphon-stage0. Call with (dict "root" $ "component" "stage0"). */}}
{{- define "antiphon.componentName" -}}
{{- printf "%s-%s" (include "antiphon.fullname" .root) .component | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "antiphon.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* Labels on every resource of the release. */}}
{{- define "antiphon.labels" -}}
helm.sh/chart: {{ include "antiphon.chart" . }}
app.kubernetes.io/name: {{ include "antiphon.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: antiphon
{{- end -}}

{{/* Selector labels of one component. Call with (dict "root" $ "component" "..."). */}}
{{- define "antiphon.selectorLabels" -}}
app.kubernetes.io/name: {{ include "antiphon.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* All labels of one component's resources. */}}
{{- define "antiphon.componentLabels" -}}
{{ include "antiphon.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "antiphon.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "antiphon.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/* The image reference of a component. Call with (dict "root" $ "component" "..."). */}}
{{- define "antiphon.image" -}}
{{- $v := index .root.Values .component -}}
{{- $registry := .root.Values.image.registry -}}
{{- $tag := $v.image.tag | default .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{- if $registry -}}
{{- printf "%s/%s:%s" (trimSuffix "/" $registry) $v.image.repository $tag -}}
{{- else -}}
{{- printf "%s:%s" $v.image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* gRPC address of a component's Service (headless: the name resolves to every ready pod). */}}
{{- define "antiphon.grpcAddress" -}}
{{- $v := index .root.Values .component -}}
{{- printf "%s:%d" (include "antiphon.componentName" .) (int $v.service.port) -}}
{{- end -}}

{{/* Every front end's gRPC address on that Service, as a JSON list: the session
service's static fallback when the worker registry is unreadable. */}}
{{- define "antiphon.grpcAddresses" -}}
{{- $v := index .root.Values .component -}}
{{- $name := include "antiphon.componentName" . -}}
{{- $addresses := list -}}
{{- range $i := until (int (include "antiphon.frontEnds" .)) -}}
{{- $addresses = append $addresses (printf "%s:%d" $name (add $v.service.port $i)) -}}
{{- end -}}
{{- toJson $addresses -}}
{{- end -}}

{{- define "antiphon.redisName" -}}
{{- printf "%s-redis" (include "antiphon.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The ANTIPHON_REDIS_URL env entry of the session service and the stage workers. */}}
{{- define "antiphon.redisUrlEnv" -}}
- name: ANTIPHON_REDIS_URL
{{- if .Values.redis.enabled }}
  value: {{ printf "redis://%s:6379/0" (include "antiphon.redisName" .) | quote }}
{{- else if .Values.redis.externalUrlSecret.name }}
  valueFrom:
    secretKeyRef:
      name: {{ .Values.redis.externalUrlSecret.name }}
      key: {{ .Values.redis.externalUrlSecret.key | default "redis-url" }}
{{- else }}
  value: {{ .Values.redis.externalUrl | quote }}
{{- end }}
{{- end -}}

{{/* Pod template annotations: roll the pods when the profile changes. */}}
{{- define "antiphon.podAnnotations" -}}
{{- $v := index .root.Values .component -}}
checksum/profile: {{ include (print .root.Template.BasePath "/profile-configmap.yaml") .root | sha256sum }}
{{- with $v.podAnnotations }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
Environment every Antiphon container gets: the profile, the pod's identity
for traces, and the OTLP endpoint when tracing is configured.
*/}}
{{- define "antiphon.commonEnv" -}}
- name: ANTIPHON_PROFILE
  value: /etc/antiphon/profile.yaml
- name: POD_NAME
  valueFrom:
    fieldRef:
      fieldPath: metadata.name
- name: POD_NAMESPACE
  valueFrom:
    fieldRef:
      fieldPath: metadata.namespace
- name: OTEL_RESOURCE_ATTRIBUTES
  value: "k8s.pod.name=$(POD_NAME),k8s.namespace.name=$(POD_NAMESPACE)"
{{- with .Values.tracing.otlpEndpoint }}
- name: ANTIPHON_OTLP_ENDPOINT
  value: {{ . | quote }}
{{- end }}
{{- end -}}

{{/* A probe: the handler given, plus the component's timings for that probe. */}}
{{- define "antiphon.probe" -}}
{{ toYaml .handler }}
{{ toYaml .timings }}
{{- end -}}

{{/*
The pod-level scheduling fields of a component: node selector, tolerations,
affinity, a soft spread over nodes, runtime class.
*/}}
{{- define "antiphon.scheduling" -}}
{{- $v := index .root.Values .component -}}
{{- with $v.runtimeClassName }}
runtimeClassName: {{ . }}
{{- end }}
{{- with $v.nodeSelector }}
nodeSelector:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.tolerations }}
tolerations:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- with $v.affinity }}
affinity:
  {{- toYaml . | nindent 2 }}
{{- end }}
{{- if $v.spreadAcrossNodes }}
topologySpreadConstraints:
  - maxSkew: 1
    topologyKey: kubernetes.io/hostname
    whenUnsatisfiable: ScheduleAnyway
    labelSelector:
      matchLabels:
        {{- include "antiphon.selectorLabels" . | nindent 8 }}
{{- end }}
{{- end -}}

{{/* The HorizontalPodAutoscaler of a component. */}}
{{- define "antiphon.hpa" -}}
{{- $v := index .root.Values .component -}}
{{- if $v.autoscaling.enabled }}
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata:
  name: {{ include "antiphon.componentName" . }}
  labels:
    {{- include "antiphon.componentLabels" . | nindent 4 }}
spec:
  scaleTargetRef:
    apiVersion: apps/v1
    kind: Deployment
    name: {{ include "antiphon.componentName" . }}
  minReplicas: {{ $v.autoscaling.minReplicas }}
  maxReplicas: {{ $v.autoscaling.maxReplicas }}
  metrics:
    {{- with $v.autoscaling.targetCPUUtilizationPercentage }}
    - type: Resource
      resource:
        name: cpu
        target:
          type: Utilization
          averageUtilization: {{ . }}
    {{- end }}
    {{- with $v.autoscaling.targetMemoryUtilizationPercentage }}
    - type: Resource
      resource:
        name: memory
        target:
          type: Utilization
          averageUtilization: {{ . }}
    {{- end }}
    {{- range $v.autoscaling.podsMetrics }}
    - type: Pods
      pods:
        metric:
          name: {{ .name }}
        target:
          type: AverageValue
          averageValue: {{ .averageValue | quote }}
    {{- end }}
  {{- with $v.autoscaling.behavior }}
  behavior:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end }}
{{- end -}}

{{/* The PodDisruptionBudget of a component. */}}
{{- define "antiphon.pdb" -}}
{{- $v := index .root.Values .component -}}
{{- if $v.pdb.enabled }}
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: {{ include "antiphon.componentName" . }}
  labels:
    {{- include "antiphon.componentLabels" . | nindent 4 }}
spec:
  {{- if not (kindIs "invalid" $v.pdb.minAvailable) }}
  minAvailable: {{ $v.pdb.minAvailable }}
  {{- else }}
  maxUnavailable: {{ $v.pdb.maxUnavailable }}
  {{- end }}
  selector:
    matchLabels:
      {{- include "antiphon.selectorLabels" . | nindent 6 }}
{{- end }}
{{- end -}}

{{/* The headless Service of a gRPC component: its name resolves to every ready pod. */}}
{{- define "antiphon.grpcService" -}}
{{- $v := index .root.Values .component -}}
apiVersion: v1
kind: Service
metadata:
  name: {{ include "antiphon.componentName" . }}
  labels:
    {{- include "antiphon.componentLabels" . | nindent 4 }}
spec:
  clusterIP: None
  selector:
    {{- include "antiphon.selectorLabels" . | nindent 4 }}
  ports:
    {{- range $i := until (int (include "antiphon.frontEnds" .)) }}
    {{- $grpc := include "antiphon.portName" (dict "name" "grpc" "index" $i) }}
    {{- $metrics := include "antiphon.portName" (dict "name" "metrics" "index" $i) }}
    - name: {{ $grpc }}
      port: {{ add $v.service.port $i }}
      targetPort: {{ $grpc }}
      protocol: TCP
      appProtocol: grpc
    - name: {{ $metrics }}
      port: {{ add $v.service.metricsPort $i }}
      targetPort: {{ $metrics }}
      protocol: TCP
    {{- end }}
    {{- if eq (include "antiphon.stepperMetrics" .) "1" }}
    - name: metrics-stepper
      port: {{ add $v.service.metricsPort (int (include "antiphon.frontEnds" .)) }}
      targetPort: metrics-stepper
      protocol: TCP
    {{- end }}
{{- end -}}
