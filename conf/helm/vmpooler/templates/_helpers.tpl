{{/* vim: set filetype=mustache: */}}

{{/* The chart's name (nameOverride wins), at most 63 characters. */}}
{{- define "vmpooler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
The release's full name, the prefix of every object except the ConfigMaps (whose names are
values) and the built-in Redis (see "vmpooler.redis.fullname"). As vmpooler-deployment's
chart: fullnameOverride, else the release name when it contains the chart name, else
"<release>-<chart>".
*/}}
{{- define "vmpooler.fullname" -}}
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

{{- define "vmpooler.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/*
Selector labels of one component: name, instance and component. They never change for a
release (Kubernetes forbids changing a Deployment's selector). Call with
(dict "ctx" $ "component" "api").
*/}}
{{- define "vmpooler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "vmpooler.name" .ctx }}
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Every label of one component's objects and pods. Call as "vmpooler.selectorLabels". */}}
{{- define "vmpooler.labels" -}}
{{ include "vmpooler.selectorLabels" . }}
app.kubernetes.io/version: {{ .ctx.Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .ctx.Release.Service }}
app.kubernetes.io/part-of: vmpooler
helm.sh/chart: {{ include "vmpooler.chart" .ctx }}
{{- end -}}

{{/* Labels of objects that belong to no one component (ServiceAccount, Ingress). */}}
{{- define "vmpooler.commonLabels" -}}
app.kubernetes.io/name: {{ include "vmpooler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: vmpooler
helm.sh/chart: {{ include "vmpooler.chart" . }}
{{- end -}}

{{- define "vmpooler.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "vmpooler.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "vmpooler.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag | toString) -}}
{{- end -}}

{{/*
Redis. External when redis.host is set; else the built-in single pod when redis.enabled.
*/}}
{{- define "vmpooler.redis.builtin" -}}
{{- if and (not .Values.redis.host) .Values.redis.enabled -}}true{{- end -}}
{{- end -}}

{{/* The built-in Redis's base name: redis.fullnameOverride, else "<fullname>-redis". */}}
{{- define "vmpooler.redis.fullname" -}}
{{- if .Values.redis.fullnameOverride -}}
{{- .Values.redis.fullnameOverride | trunc 56 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-redis" (include "vmpooler.fullname" . | trunc 50 | trimSuffix "-") -}}
{{- end -}}
{{- end -}}

{{/* The built-in Redis's Deployment and Service: "<redis fullname>-master", as bitnami's. */}}
{{- define "vmpooler.redis.serviceName" -}}
{{- printf "%s-master" (include "vmpooler.redis.fullname" .) -}}
{{- end -}}

{{/* The host vmpooler connects to. */}}
{{- define "vmpooler.redis.host" -}}
{{- if .Values.redis.host -}}
{{- .Values.redis.host -}}
{{- else if include "vmpooler.redis.builtin" . -}}
{{- include "vmpooler.redis.serviceName" . -}}
{{- else -}}
{{- fail "redis: set redis.host (an external Redis) or redis.enabled: true (the built-in one)" -}}
{{- end -}}
{{- end -}}

{{/*
The Secret holding the Redis password, or "" when Redis has no password (an external Redis
with neither redis.existingSecret nor redis.password).
*/}}
{{- define "vmpooler.redis.secretName" -}}
{{- if .Values.redis.existingSecret -}}
{{- .Values.redis.existingSecret -}}
{{- else if or (include "vmpooler.redis.builtin" .) .Values.redis.password -}}
{{- include "vmpooler.redis.fullname" . -}}
{{- end -}}
{{- end -}}

{{- define "vmpooler.redis.secretKey" -}}
{{- default "redis-password" .Values.redis.existingSecretPasswordKey -}}
{{- end -}}

{{/*
REDIS_RECONNECT_ATTEMPTS: vmpooler 3.x reads a JSON list of delays (one retry each) or a
number; vmpooler for Python reads a number of retries, so a list becomes its length.
*/}}
{{- define "vmpooler.reconnectAttempts" -}}
{{- $v := .Values.redis_reconnect_attempts -}}
{{- if kindIs "slice" $v -}}
{{- len $v -}}
{{- else if hasPrefix "[" (toString $v | trim) -}}
{{- len (fromJsonArray (toString $v)) -}}
{{- else -}}
{{- toString $v -}}
{{- end -}}
{{- end -}}

{{/* One env entry from a value, left out when the value is null or "". */}}
{{- define "vmpooler.envValue" -}}
{{- if and (not (kindIs "invalid" .value)) (ne (toString .value) "") }}
- name: {{ .name }}
  value: {{ toString .value | quote }}
{{- end }}
{{- end -}}

{{/* VMPOOLER_PROVIDER_<NAME>_<KEY>, as vmpooler.actors.config.env.provider_env_name. */}}
{{- define "vmpooler.providerEnvName" -}}
{{- printf "VMPOOLER_PROVIDER_%s_%s" (regexReplaceAll "[^A-Za-z0-9]" (upper .provider) "_") (upper .key) -}}
{{- end -}}

{{/* The files vmpooler merges over vmpooler.yaml (EXTRA_CONFIG), comma-separated. */}}
{{- define "vmpooler.extraConfig" -}}
{{- $files := list -}}
{{- range splitList "," (toString (default "" .Values.additionalConfigFiles)) -}}
{{- if trim . }}{{ $files = append $files (trim .) }}{{ end -}}
{{- end -}}
{{- range .Values.extraConfigSecrets -}}
{{- $files = append $files (printf "/etc/vmpooler/secrets/%s/%s" .name (default "vmpooler.yaml" .key)) -}}
{{- end -}}
{{- join "," $files -}}
{{- end -}}

{{/*
The environment both containers get. Call with (dict "ctx" $ "component" "api").
Entries of extraEnv come last, so they win over the chart's.
*/}}
{{- define "vmpooler.env" -}}
{{- $ := .ctx -}}
{{- $v := $.Values -}}
- name: VMPOOLER_CONFIG_FILE
  value: /etc/vmpooler/base/vmpooler.yaml
{{- with include "vmpooler.extraConfig" $ }}
- name: EXTRA_CONFIG
  value: {{ . | quote }}
{{- end }}
- name: PORT
  value: {{ $v.service.port | toString | quote }}
- name: PROMETHEUS_MULTIPROC_DIR
  value: /tmp/prometheus
- name: REDIS_SERVER
  value: {{ include "vmpooler.redis.host" $ | quote }}
- name: REDIS_PORT
  value: {{ $v.redis.port | default 6379 | toString | quote }}
{{- with include "vmpooler.redis.secretName" $ }}
- name: REDIS_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: {{ include "vmpooler.redis.secretKey" $ }}
{{- end }}
- name: SITE_NAME
  value: {{ printf "<b>%s</b>%s" (toString $v.vmpoolerInstance) (ternary (printf ".%s" (toString $v.ingress.domain)) "" (not (empty $v.ingress.domain))) | quote }}
{{- include "vmpooler.envValue" (dict "name" "USAGE_STATS" "value" $v.usage_stats) }}
{{- include "vmpooler.envValue" (dict "name" "VM_LIFETIME" "value" $v.vm_lifetime) }}
{{- include "vmpooler.envValue" (dict "name" "VM_LIFETIME_AUTH" "value" $v.vm_lifetime_auth) }}
{{- include "vmpooler.envValue" (dict "name" "MAX_LIFETIME_UPPER_LIMIT" "value" $v.max_lifetime_upper_limit) }}
{{- include "vmpooler.envValue" (dict "name" "ONDEMAND_REQUEST_TTL" "value" $v.ondemand_request_ttl) }}
{{- include "vmpooler.envValue" (dict "name" "ONDEMAND_CLONE_LIMIT" "value" $v.ondemand_clone_limit) }}
{{- include "vmpooler.envValue" (dict "name" "TIMEOUT" "value" $v.timeout) }}
{{- include "vmpooler.envValue" (dict "name" "REDIS_CONNECTION_POOL_SIZE" "value" $v.redis_connection_pool_size) }}
{{- include "vmpooler.envValue" (dict "name" "REDIS_CONNECTION_POOL_TIMEOUT" "value" $v.redis_connection_pool_timeout) }}
{{- include "vmpooler.envValue" (dict "name" "REDIS_RECONNECT_ATTEMPTS" "value" (include "vmpooler.reconnectAttempts" $)) }}
{{- if and $v.tracing (eq (toString $v.tracing.enabled) "true") }}
- name: VMPOOLER_TRACING_ENABLED
  value: "true"
{{- include "vmpooler.envValue" (dict "name" "VMPOOLER_TRACING_JAEGER_HOST" "value" $v.tracing.jaegerHost) }}
{{- include "vmpooler.envValue" (dict "name" "VMPOOLER_TRACING_OTLP_ENDPOINT" "value" $v.tracing.otlpEndpoint) }}
{{- include "vmpooler.envValue" (dict "name" "VMPOOLER_TRACING_SAMPLE_RATIO" "value" $v.tracing.sampleRatio) }}
{{- end }}
{{- if eq .component "manager" }}
- name: VMPOOLER_MANAGER_BIND
  value: {{ printf "0.0.0.0:%v" $v.service.port | quote }}
{{- include "vmpooler.envValue" (dict "name" "GOOGLE_APPLICATION_CREDENTIALS" "value" ($v.gce | default dict).keyfile) }}
{{- include "vmpooler.envValue" (dict "name" "AWS_KEY_FILE_LOCATION" "value" ($v.ec2 | default dict).keyfile) }}
{{- include "vmpooler.envValue" (dict "name" "ROOT_KEYS_SCRIPT" "value" ($v.ec2 | default dict).root_keys_script) }}
{{- end }}
{{- range $v.providerCredentials }}
{{- $entry := . }}
{{- range $key := list "server" "username" "password" }}
{{- $secretKey := ternary "" $key (eq $key "server") }}
{{- if hasKey $entry (printf "%sKey" $key) }}{{ $secretKey = index $entry (printf "%sKey" $key) }}{{ end }}
{{- if $secretKey }}
- name: {{ include "vmpooler.providerEnvName" (dict "provider" (required "providerCredentials[].provider is required" $entry.provider) "key" $key) }}
  valueFrom:
    secretKeyRef:
      name: {{ required "providerCredentials[].existingSecret is required" $entry.existingSecret }}
      key: {{ $secretKey }}
{{- end }}
{{- end }}
{{- end }}
{{- with $v.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
A probe that GETs `path` on the container's port: httpGet, or with probeHandler "exec" a
python3 one-liner in the container (podman kube play runs httpGet probes with curl, which the
image does not have). Call with (dict "ctx" $ "path" "/healthcheck" "settings" $probeValues).
*/}}
{{- define "vmpooler.probe" -}}
{{- $port := .ctx.Values.service.port -}}
{{- $settings := .settings | default dict -}}
{{- if eq (toString .ctx.Values.probeHandler) "exec" }}
exec:
  command:
    - python3
    - -c
    - {{ printf "import sys, urllib.request as r; sys.exit(r.urlopen('http://127.0.0.1:%v%s', timeout=%v).status != 200)" $port .path ($settings.timeoutSeconds | default 1) | quote }}
{{- else if eq (toString .ctx.Values.probeHandler) "httpGet" }}
httpGet:
  path: {{ .path }}
  port: {{ $port }}
{{- else }}
{{- fail (printf "probeHandler: expected httpGet or exec, got %v" .ctx.Values.probeHandler) }}
{{- end }}
{{- with $settings }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/*
The pod template of the API or a manager. Call with
(dict "ctx" $ "component" "api" "args" (list ...) "liveness" "/healthcheck" "readiness" "/ready").
*/}}
{{- define "vmpooler.podTemplate" -}}
{{- $ := .ctx -}}
{{- $v := $.Values -}}
{{- $c := index $v .component -}}
metadata:
  labels:
    {{- include "vmpooler.labels" (dict "ctx" $ "component" .component) | nindent 4 }}
    app: {{ include "vmpooler.fullname" $ }}-{{ .component }}
  annotations:
    checksum/config: {{ include (print $.Template.BasePath "/configmaps.yaml") $ | sha256sum }}
    {{- with $c.annotations }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
spec:
  {{- with $v.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  serviceAccountName: {{ include "vmpooler.serviceAccountName" $ }}
  automountServiceAccountToken: false
  {{- with $v.podSecurityContext }}
  securityContext:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  containers:
    - name: {{ .component }}
      image: {{ include "vmpooler.image" $ | quote }}
      imagePullPolicy: {{ $v.image.pullPolicy }}
      args:
        {{- toYaml .args | nindent 8 }}
      ports:
        - name: http
          containerPort: {{ $v.service.port }}
          protocol: TCP
      env:
        {{- include "vmpooler.env" (dict "ctx" $ "component" .component) | nindent 8 }}
      {{- with $v.extraEnvFrom }}
      envFrom:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      livenessProbe:
        {{- include "vmpooler.probe" (dict "ctx" $ "path" .liveness "settings" $c.livenessProbe) | trim | nindent 8 }}
      readinessProbe:
        {{- include "vmpooler.probe" (dict "ctx" $ "path" .readiness "settings" $c.readinessProbe) | trim | nindent 8 }}
      {{- with $c.resources }}
      resources:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      {{- with $v.securityContext }}
      securityContext:
        {{- toYaml . | nindent 8 }}
      {{- end }}
      volumeMounts:
        # Side by side, not nested: a volume mounted inside a read-only ConfigMap volume
        # needs the runtime to make its mount point there (podman cannot).
        - name: config
          mountPath: /etc/vmpooler/base
          readOnly: true
        - name: pools
          mountPath: /etc/vmpooler/config
          readOnly: true
        {{- range $i, $secret := $v.extraConfigSecrets }}
        - name: secret-config-{{ $i }}
          mountPath: /etc/vmpooler/secrets/{{ $secret.name }}
          readOnly: true
        {{- end }}
        - name: tmp
          mountPath: /tmp
        {{- with $v.extraVolumeMounts }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
  volumes:
    - name: config
      configMap:
        name: {{ $v.configmapName }}
        items:
          - key: vmpooler.yaml
            path: vmpooler.yaml
    - name: pools
      configMap:
        name: {{ $v.poolsConfigMapName }}
        items:
          - key: pools.yaml
            path: pools.yaml
    {{- range $i, $secret := $v.extraConfigSecrets }}
    - name: secret-config-{{ $i }}
      secret:
        secretName: {{ required "extraConfigSecrets[].name is required" $secret.name }}
        defaultMode: 0440
        items:
          - key: {{ default "vmpooler.yaml" $secret.key }}
            path: {{ default "vmpooler.yaml" $secret.key }}
    {{- end }}
    - name: tmp
      emptyDir: {}
    {{- with $v.extraVolumes }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/*
Fails when `text` (a file of a ConfigMap) has a line matching `pattern` (a key named like a
secret) whose value is not null, empty or a boolean (require_token_for_vm_changes is no secret). Call with (dict "pattern" ... "text" ... "file" ...).
*/}}
{{- define "vmpooler.refuseSecrets" -}}
{{- range regexFindAll .pattern .text -1 }}
{{- $value := regexReplaceAll `^\s*(?:- )?\S*?:\s+` . "" | trim }}
{{- if not (has (lower $value) (list "null" "~" "''" "\"\"" "true" "false")) }}
{{- fail (printf "the %s ConfigMap would hold a secret (%s): ConfigMaps are not for secrets; give provider credentials through providerCredentials, other secret keys through extraConfigSecrets (see the chart's README)" $.file (regexReplaceAll `:\s+.*` (trim .) ": ...")) }}
{{- end }}
{{- end }}
{{- end -}}
