{{/* The release's name for every object, at most 63 characters. */}}
{{- define "idem.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "idem.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The hosts' pods (not the migration Job's): services, the disruption
budget and the spread select these. */}}
{{- define "idem.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: host
{{- end -}}

{{- define "idem.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{- define "idem.serviceAccount" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "idem.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{/*
The checks a render fails on, each naming the value that is wrong.
*/}}
{{- define "idem.checks" -}}
{{- $listen := regexFind "(?m)^\\s*listen\\s*=\\s*[\"'][^\"']*[\"']" .Values.config -}}
{{- if or (not $listen) (regexMatch "[\"'](127\\.|localhost|\\[::1\\])" $listen) -}}
{{- fail "config: [admin] listen must be set off loopback (\"0.0.0.0:7700\", \"[::]:7700\"): the kubelet's probes reach /healthz and /readyz on the pod's address" -}}
{{- end -}}
{{- $shutdown := regexFind "(?ms)^\\[shutdown\\][^\\[]*" .Values.config -}}
{{- $timeout := regexFind "(?m)^\\s*timeout\\s*=.*$" $shutdown -}}
{{- $seconds := 10 -}}
{{- if $timeout -}}
{{- $value := regexFind "[0-9]+(ms|s|m|h)[\"']" $timeout | trimSuffix "\"" | trimSuffix "'" -}}
{{- if not $value -}}
{{- fail (printf "config: [shutdown] %s: the chart reads a timeout written as a number and ms, s, m or h" (trim $timeout)) -}}
{{- end -}}
{{- $n := regexFind "^[0-9]+" $value | int -}}
{{- if hasSuffix "ms" $value -}}{{- $seconds = div (add $n 999) 1000 -}}
{{- else if hasSuffix "s" $value -}}{{- $seconds = $n -}}
{{- else if hasSuffix "m" $value -}}{{- $seconds = mul $n 60 -}}
{{- else -}}{{- $seconds = mul $n 3600 -}}
{{- end -}}
{{- end -}}
{{- if ne $seconds (int .Values.shutdownTimeoutSeconds) -}}
{{- fail (printf "shutdownTimeoutSeconds is %d but config's [shutdown] timeout is %d s: set them equal (the grace period is derived from it)" (int .Values.shutdownTimeoutSeconds) $seconds) -}}
{{- end -}}
{{- if lt (int .Values.shutdownMarginSeconds) 5 -}}
{{- fail "shutdownMarginSeconds must be at least 5: Kubernetes would SIGKILL a host still closing its consumers" -}}
{{- end -}}
{{- if and .Values.autoscaling.enabled (lt (int .Values.autoscaling.maxReplicas) (int .Values.autoscaling.minReplicas)) -}}
{{- fail "autoscaling.maxReplicas is below autoscaling.minReplicas" -}}
{{- end -}}
{{- end -}}

{{/* The port of [admin] listen. */}}
{{- define "idem.adminPort" -}}
{{- regexFind "[0-9]+[\"']" (regexFind "(?m)^\\s*listen\\s*=\\s*[\"'][^\"']*[\"']" .Values.config) | trimSuffix "\"" | trimSuffix "'" | default "7700" -}}
{{- end -}}
