{{/*
The Deployment every component uses. Call with a dict:
  root       the top-level context ($)
  component  gateway | session | stage0 | stage1
  env        YAML list (string) of the component's own environment
  ports      YAML list (string) of container ports
  startup, readiness, liveness   probe handlers (dicts)
  volumes, volumeMounts          YAML lists (strings) of extra ones, optional
*/}}
{{- define "antiphon.deployment" -}}
{{- $root := .root -}}
{{- $v := index $root.Values .component -}}
{{- $ctx := dict "root" $root "component" .component -}}
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ include "antiphon.componentName" $ctx }}
  labels:
    {{- include "antiphon.componentLabels" $ctx | nindent 4 }}
spec:
  {{- if not $v.autoscaling.enabled }}
  replicas: {{ $v.replicaCount }}
  {{- end }}
  revisionHistoryLimit: 5
  selector:
    matchLabels:
      {{- include "antiphon.selectorLabels" $ctx | nindent 6 }}
  strategy:
    type: RollingUpdate
    rollingUpdate:
      # A new pod is ready before an old one drains: capacity never dips.
      maxSurge: 1
      maxUnavailable: 0
  template:
    metadata:
      labels:
        {{- include "antiphon.selectorLabels" $ctx | nindent 8 }}
        app.kubernetes.io/part-of: antiphon
        {{- with $v.podLabels }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      annotations:
        {{- include "antiphon.podAnnotations" $ctx | nindent 8 }}
    spec:
      serviceAccountName: {{ include "antiphon.serviceAccountName" $root }}
      automountServiceAccountToken: false
      {{- with $root.Values.imagePullSecrets }}
      imagePullSecrets:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      securityContext:
        {{- toYaml $root.Values.podSecurityContext | nindent 8 }}
      terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
      {{- with (include "antiphon.scheduling" $ctx | trim) }}
      {{- . | nindent 6 }}
      {{- end }}
      containers:
        - name: {{ .component }}
          image: {{ include "antiphon.image" $ctx | quote }}
          imagePullPolicy: {{ $root.Values.image.pullPolicy }}
          securityContext:
            {{- toYaml $root.Values.securityContext | nindent 12 }}
          ports:
            {{- .ports | nindent 12 }}
          env:
            {{- include "antiphon.commonEnv" $root | nindent 12 }}
            {{- .env | nindent 12 }}
            {{- with $v.extraEnv }}
            {{- toYaml . | nindent 12 }}
            {{- end }}
          startupProbe:
            {{- include "antiphon.probe" (dict "handler" .startup "timings" $v.probes.startup) | nindent 12 }}
          readinessProbe:
            {{- include "antiphon.probe" (dict "handler" .readiness "timings" $v.probes.readiness) | nindent 12 }}
          livenessProbe:
            {{- include "antiphon.probe" (dict "handler" .liveness "timings" $v.probes.liveness) | nindent 12 }}
          {{- if $v.preStopSleepSeconds }}
          lifecycle:
            preStop:
              sleep:
                seconds: {{ $v.preStopSleepSeconds }}
          {{- end }}
          resources:
            {{- toYaml $v.resources | nindent 12 }}
          volumeMounts:
            - name: profile
              mountPath: /etc/antiphon
              readOnly: true
            - name: tmp
              mountPath: /tmp
            {{- with .volumeMounts }}
            {{- . | nindent 12 }}
            {{- end }}
      volumes:
        - name: profile
          configMap:
            name: {{ include "antiphon.fullname" $root }}-profile
        - name: tmp
          emptyDir: {}
        {{- with .volumes }}
        {{- . | nindent 8 }}
        {{- end }}
{{- end -}}
