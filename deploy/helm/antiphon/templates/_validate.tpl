{{/*
Refuse to render values that cannot work. Each check names the value to change.
Rendered by validate.yaml, so `helm template`, `helm install` and `helm lint` all fail.
*/}}
{{- define "antiphon.validate" -}}
{{- $errors := list -}}
{{- $grace := float64 (.Values.profile.common.shutdown_grace_s | default 10) -}}
{{- range $c := list "gateway" "session" "stage0" "stage1" -}}
{{- $v := index $.Values $c -}}
{{- if not $v.image.repository -}}
{{- $errors = append $errors (printf "%s.image.repository is empty" $c) -}}
{{- end -}}
{{- $a := $v.autoscaling -}}
{{- $minReplicas := int $v.replicaCount -}}
{{- if $a.enabled -}}
{{- $minReplicas = int $a.minReplicas -}}
{{- if lt (int $a.minReplicas) 1 -}}
{{- $errors = append $errors (printf "%s.autoscaling.minReplicas (%v) must be at least 1" $c $a.minReplicas) -}}
{{- end -}}
{{- if gt (int $a.minReplicas) (int $a.maxReplicas) -}}
{{- $errors = append $errors (printf "%s.autoscaling.minReplicas (%v) is above maxReplicas (%v)" $c $a.minReplicas $a.maxReplicas) -}}
{{- end -}}
{{- if not (or $a.targetCPUUtilizationPercentage $a.targetMemoryUtilizationPercentage $a.podsMetrics) -}}
{{- $errors = append $errors (printf "%s.autoscaling is enabled with no metric: set targetCPUUtilizationPercentage, targetMemoryUtilizationPercentage or podsMetrics" $c) -}}
{{- end -}}
{{- else if lt (int $v.replicaCount) 1 -}}
{{- $errors = append $errors (printf "%s.replicaCount (%v) must be at least 1" $c $v.replicaCount) -}}
{{- end -}}
{{- $needed := addf $grace (float64 ($v.preStopSleepSeconds | default 0)) -}}
{{- if le (float64 $v.terminationGracePeriodSeconds) $needed -}}
{{- $errors = append $errors (printf "%s.terminationGracePeriodSeconds (%v) must exceed profile.common.shutdown_grace_s + %s.preStopSleepSeconds (%v): pods would be killed mid-drain" $c $v.terminationGracePeriodSeconds $c $needed) -}}
{{- end -}}
{{- if $v.pdb.enabled -}}
{{- if and (not (kindIs "invalid" $v.pdb.minAvailable)) (not (kindIs "invalid" $v.pdb.maxUnavailable)) -}}
{{- $errors = append $errors (printf "%s.pdb: set minAvailable or maxUnavailable, not both" $c) -}}
{{- else if and (kindIs "invalid" $v.pdb.minAvailable) (kindIs "invalid" $v.pdb.maxUnavailable) -}}
{{- $errors = append $errors (printf "%s.pdb: set minAvailable or maxUnavailable" $c) -}}
{{- else if and (not (kindIs "invalid" $v.pdb.minAvailable)) (not (kindIs "string" $v.pdb.minAvailable)) -}}
{{- if ge (int $v.pdb.minAvailable) $minReplicas -}}
{{- $errors = append $errors (printf "%s.pdb.minAvailable (%v) must be below the replica count (%v), or no node could ever be drained" $c $v.pdb.minAvailable $minReplicas) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- range $c := list "stage0" "stage1" -}}
{{- $capacity := float64 ((index $.Values.profile $c).capacity | default 0) -}}
{{- range (index $.Values $c).autoscaling.podsMetrics -}}
{{- if and (eq .name (printf "antiphon_%s_sessions_active" $c)) (regexMatch "^[0-9]+(\\.[0-9]+)?$" (toString .averageValue)) -}}
{{- if and (gt $capacity 0.0) (gt (float64 .averageValue) $capacity) -}}
{{- $errors = append $errors (printf "%s.autoscaling: target %v sessions per worker is above profile.%s.capacity (%v): workers would be full before a new one starts" $c .averageValue $c $capacity) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- $s0 := .Values.profile.stage0 -}}
{{- $frontEnds := int ($s0.llm_front_ends | default 1) -}}
{{- if lt $frontEnds 1 -}}
{{- $errors = append $errors (printf "profile.stage0.llm_front_ends (%v) must be at least 1" $s0.llm_front_ends) -}}
{{- else if gt $frontEnds 1 -}}
{{- if ne ($s0.backend | default "cascade") "cascade" -}}
{{- $errors = append $errors (printf "profile.stage0.llm_front_ends (%d) shares a vLLM engine core: the %v backend has none (set it to 1)" $frontEnds $s0.backend) -}}
{{- end -}}
{{- if lt (int ($s0.capacity | default 0)) $frontEnds -}}
{{- $errors = append $errors (printf "profile.stage0.capacity (%v) leaves some of the %d front ends (llm_front_ends) no session" $s0.capacity $frontEnds) -}}
{{- end -}}
{{- $grpc := int .Values.stage0.service.port -}}
{{- $metrics := int .Values.stage0.service.metricsPort -}}
{{- if and (lt $grpc (add $metrics $frontEnds)) (lt $metrics (add $grpc $frontEnds)) -}}
{{- $errors = append $errors (printf "stage0.service.port (%d) and metricsPort (%d): the %d front ends (llm_front_ends) take port + i and metricsPort + i, and these overlap" $grpc $metrics $frontEnds) -}}
{{- end -}}
{{- end -}}
{{- $duplexFrontEnds := int ($s0.duplex_front_ends | default 1) -}}
{{- if lt $duplexFrontEnds 1 -}}
{{- $errors = append $errors (printf "profile.stage0.duplex_front_ends (%v) must be at least 1" $s0.duplex_front_ends) -}}
{{- else if gt $duplexFrontEnds 1 -}}
{{- if ne ($s0.backend | default "cascade") "moshi" -}}
{{- $errors = append $errors (printf "profile.stage0.duplex_front_ends (%d) shares a duplex stepper: the %v backend has none (set it to 1)" $duplexFrontEnds ($s0.backend | default "cascade")) -}}
{{- end -}}
{{- if gt $frontEnds 1 -}}
{{- $errors = append $errors "profile.stage0.duplex_front_ends and llm_front_ends cannot both be above 1" -}}
{{- end -}}
{{- if lt (int ($s0.capacity | default 0)) $duplexFrontEnds -}}
{{- $errors = append $errors (printf "profile.stage0.capacity (%v) leaves some of the %d front ends (duplex_front_ends) no session" $s0.capacity $duplexFrontEnds) -}}
{{- end -}}
{{- $grpc := int .Values.stage0.service.port -}}
{{- $metrics := int .Values.stage0.service.metricsPort -}}
{{- if and (lt $grpc (add $metrics $duplexFrontEnds 1)) (lt $metrics (add $grpc $duplexFrontEnds)) -}}
{{- $errors = append $errors (printf "stage0.service.port (%d) and metricsPort (%d): the %d front ends (duplex_front_ends) take port + i and metricsPort + i, their stepper metricsPort + %d, and these overlap" $grpc $metrics $duplexFrontEnds $duplexFrontEnds) -}}
{{- end -}}
{{- end -}}
{{- $s1 := .Values.profile.stage1 -}}
{{- $processes := int ($s1.worker_processes | default 1) -}}
{{- if lt $processes 1 -}}
{{- $errors = append $errors (printf "profile.stage1.worker_processes (%v) must be at least 1" $s1.worker_processes) -}}
{{- else if gt $processes 1 -}}
{{- if eq ($s1.backend | default "piper") "mimi" -}}
{{- $errors = append $errors (printf "profile.stage1.worker_processes (%d): the mimi backend decodes every session in one lockstep batch (set it to 1)" $processes) -}}
{{- end -}}
{{- if lt (int ($s1.capacity | default 0)) $processes -}}
{{- $errors = append $errors (printf "profile.stage1.capacity (%v) leaves some of the %d worker processes no session" $s1.capacity $processes) -}}
{{- end -}}
{{- $grpc := int .Values.stage1.service.port -}}
{{- $metrics := int .Values.stage1.service.metricsPort -}}
{{- if and (lt $grpc (add $metrics $processes)) (lt $metrics (add $grpc $processes)) -}}
{{- $errors = append $errors (printf "stage1.service.port (%d) and metricsPort (%d): the %d worker processes take port + i and metricsPort + i, and these overlap" $grpc $metrics $processes) -}}
{{- end -}}
{{- end -}}
{{- $stage1FrontEnds := int ($s1.duplex_front_ends | default 1) -}}
{{- if lt $stage1FrontEnds 1 -}}
{{- $errors = append $errors (printf "profile.stage1.duplex_front_ends (%v) must be at least 1" $s1.duplex_front_ends) -}}
{{- else if gt $stage1FrontEnds 1 -}}
{{- if ne ($s1.backend | default "piper") "mimi" -}}
{{- $errors = append $errors (printf "profile.stage1.duplex_front_ends (%d) shares a duplex stepper: the %v backend has none (set it to 1)" $stage1FrontEnds ($s1.backend | default "piper")) -}}
{{- end -}}
{{- if gt $processes 1 -}}
{{- $errors = append $errors "profile.stage1.duplex_front_ends and worker_processes cannot both be above 1" -}}
{{- end -}}
{{- if lt (int ($s1.capacity | default 0)) $stage1FrontEnds -}}
{{- $errors = append $errors (printf "profile.stage1.capacity (%v) leaves some of the %d front ends (duplex_front_ends) no session" $s1.capacity $stage1FrontEnds) -}}
{{- end -}}
{{- $grpc := int .Values.stage1.service.port -}}
{{- $metrics := int .Values.stage1.service.metricsPort -}}
{{- if and (lt $grpc (add $metrics $stage1FrontEnds 1)) (lt $metrics (add $grpc $stage1FrontEnds)) -}}
{{- $errors = append $errors (printf "stage1.service.port (%d) and metricsPort (%d): the %d front ends (duplex_front_ends) take port + i and metricsPort + i, their stepper metricsPort + %d, and these overlap" $grpc $metrics $stage1FrontEnds $stage1FrontEnds) -}}
{{- end -}}
{{- end -}}
{{- if lt (int .Values.profile.session.max_sessions) 1 -}}
{{- $errors = append $errors "profile.session.max_sessions must be at least 1" -}}
{{- end -}}
{{- if and (not .Values.redis.enabled) (not .Values.redis.externalUrl) (not .Values.redis.externalUrlSecret.name) -}}
{{- $errors = append $errors "redis.enabled is false: set redis.externalUrl or redis.externalUrlSecret" -}}
{{- end -}}
{{- if not (has .Values.redis.appendfsync (list "always" "everysec")) -}}
{{- $errors = append $errors (printf "redis.appendfsync (%v) must be everysec or always: acknowledged events must survive a Redis crash" .Values.redis.appendfsync) -}}
{{- end -}}
{{- if $errors -}}
{{- fail (printf "\n\nantiphon: invalid values:\n  - %s\n" (join "\n  - " $errors)) -}}
{{- end -}}
{{- end -}}
