{{/* The chart's name. */}}
{{- define "capstan.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name, used for every object. */}}
{{- define "capstan.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "capstan.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Labels to select the host's pods. */}}
{{- define "capstan.selectorLabels" -}}
app.kubernetes.io/name: {{ include "capstan.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* Standard labels of every object. */}}
{{- define "capstan.labels" -}}
helm.sh/chart: {{ include "capstan.chart" . }}
{{ include "capstan.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: capstan
{{- end }}

{{- define "capstan.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "capstan.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* repository:tag, and @digest when image.digest is set (the runtime then pulls by digest). */}}
{{- define "capstan.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- with .Values.image.digest }}@{{ . }}{{ end }}
{{- end }}

{{/* The chart-installed provider's ConfigMap. */}}
{{- define "capstan.providerConfigMap" -}}
{{- printf "%s-provider-%s" (include "capstan.fullname" .) .Values.provider.name | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
FEATURE_GATES from settings.featureGates, as Karpenter's chart writes it: each camelCase key with
its first letter upper-cased (nodeRepair -> NodeRepair=false), in key order.
*/}}
{{- define "capstan.featureGates" -}}
{{- $gates := list -}}
{{- range $name, $on := .Values.settings.featureGates -}}
{{- $gates = append $gates (printf "%s%s=%t" (upper (substr 0 1 $name)) (substr 1 (len $name) $name) $on) -}}
{{- end -}}
{{- join "," $gates -}}
{{- end -}}
