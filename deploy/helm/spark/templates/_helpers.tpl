{{/* The release's base name: the release name, with "-spark" unless it says spark already. */}}
{{- define "spark.fullname" -}}
{{- if contains "spark" .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-spark" .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* Labels on every object; "component" is gate, logic or deliver. */}}
{{- define "spark.labels" -}}
app.kubernetes.io/name: spark
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/version: {{ .root.Values.image.tag | quote }}
app.kubernetes.io/managed-by: {{ .root.Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .root.Chart.Name .root.Chart.Version }}
{{- with .component }}
app.kubernetes.io/component: {{ . }}
{{- end }}
{{- end -}}

{{/* The selector of one component's pods: never changes across upgrades. */}}
{{- define "spark.selector" -}}
app.kubernetes.io/name: spark
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "spark.image" -}}
{{ .root.Values.image.registry }}/spark-{{ .proc }}:{{ .root.Values.image.tag }}
{{- end -}}

{{- define "spark.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-secrets" (include "spark.fullname" .)) -}}
{{- end -}}

{{/* One environment variable from the Secret. */}}
{{- define "spark.secretEnv" -}}
- name: {{ .key }}
  valueFrom:
    secretKeyRef:
      name: {{ include "spark.secretName" .root }}
      key: {{ .key }}
      {{- if .optional }}
      optional: true
      {{- end }}
{{- end -}}

{{/* The secrets logic and its migrate init container read. */}}
{{- define "spark.logicSecretEnv" -}}
{{ include "spark.secretEnv" (dict "root" . "key" "IM_CLUSTER_SECRET") }}
{{ include "spark.secretEnv" (dict "root" . "key" "IM_LOGIC_JWT_SECRET") }}
{{ include "spark.secretEnv" (dict "root" . "key" "IM_LOGIC_API_KEYS") }}
{{ include "spark.secretEnv" (dict "root" . "key" "IM_LOGIC_MYSQL_DSN") }}
{{ include "spark.secretEnv" (dict "root" . "key" "IM_LOGIC_REDIS_PASSWORD" "optional" true) }}
{{- end -}}

{{/* The config volume and its mount: the ConfigMap's im.yaml at /etc/spark/im.yaml. */}}
{{- define "spark.configMount" -}}
- name: config
  mountPath: /etc/spark
  readOnly: true
{{- end -}}

{{- define "spark.configVolume" -}}
- name: config
  configMap:
    name: {{ include "spark.fullname" . }}-config
{{- end -}}

{{/* The container command: the image's binary with the mounted config. */}}
{{- define "spark.command" -}}
command: ["/spark/{{ . }}", "-config", "/etc/spark/im.yaml"]
{{- end -}}

{{/* The gate's shutdown bound in seconds (gate Server.ShutdownBound):
kick window + drain timeout + write timeout + 5s. */}}
{{- define "spark.gateShutdownBound" -}}
{{- $g := .Values.gate -}}
{{- add $g.kickWindowSeconds $g.drainTimeoutSeconds $g.writeTimeoutSeconds 5 -}}
{{- end -}}

{{/* The database port: the kind's default when 0. */}}
{{- define "spark.dbPort" -}}
{{- if .Values.database.port -}}{{ .Values.database.port }}{{- else if eq .Values.database.kind "tidb" -}}4000{{- else -}}3306{{- end -}}
{{- end -}}

{{/* The Redis section of logic and deliver in im.yaml. */}}
{{- define "spark.redisConfig" -}}
{{- $r := .Values.redis -}}
{{- if $r.cluster -}}
{{- dict "cluster" true "addrs" $r.addrs "db" 0 | toYaml -}}
{{- else -}}
{{- dict "addr" $r.addr "db" $r.db | toYaml -}}
{{- end -}}
{{- end -}}
