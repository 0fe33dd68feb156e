{{/*
Names, labels and the small pieces every template shares.
*/}}

{{- define "tessera.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{/* The prefix of every object name (at most 40 characters: suffixes up to 23 follow). */}}
{{- define "tessera.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- $name := include "tessera.name" . -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "tessera.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "tessera.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: tessera
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: call with (dict "root" $ "component" "scheduler"). */}}
{{- define "tessera.selectorLabels" -}}
app.kubernetes.io/name: {{ include "tessera.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "tessera.componentLabels" -}}
{{ include "tessera.labels" .root }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{/* Object names. */}}
{{- define "tessera.scheduler.fullname" -}}{{ include "tessera.fullname" . }}-scheduler{{- end -}}
{{- define "tessera.node.fullname" -}}{{ include "tessera.fullname" . }}-node{{- end -}}
{{- define "tessera.webhook.service" -}}{{ include "tessera.fullname" . }}-webhook{{- end -}}
{{- define "tessera.webhook.tlsSecret" -}}
{{- if eq (include "tessera.tlsMode" .) "secret" -}}
{{- .Values.webhooks.tls.existingSecret -}}
{{- else -}}
{{- include "tessera.fullname" . }}-webhook-tls
{{- end -}}
{{- end -}}
{{- define "tessera.signingKey.secret" -}}
{{- if .Values.signingKey.create -}}
{{- include "tessera.fullname" . }}-signing-key
{{- else -}}
{{- .Values.signingKey.existingSecret -}}
{{- end -}}
{{- end -}}
{{- define "tessera.decisionKeys.configMap" -}}{{ include "tessera.fullname" . }}-decision-keys{{- end -}}
{{- define "tessera.policy.configMap" -}}{{ include "tessera.fullname" . }}-policy{{- end -}}
{{- define "tessera.kubeScheduler.configMap" -}}{{ include "tessera.fullname" . }}-kube-scheduler{{- end -}}
{{- define "tessera.kubeScheduler.lease" -}}{{ include "tessera.fullname" . }}-kube-scheduler{{- end -}}

{{/* The user tessera-scheduler (and its kube-scheduler) act as: may write decisions. */}}
{{- define "tessera.scheduler.user" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "tessera.scheduler.fullname" . }}
{{- end -}}
{{- define "tessera.node.user" -}}
system:serviceaccount:{{ .Release.Namespace }}:{{ include "tessera.node.fullname" . }}
{{- end -}}

{{/* repository:tag of a tessera image: call with (dict "root" $ "image" .Values.scheduler.image). */}}
{{- define "tessera.image" -}}
{{- $tag := .image.tag | default .root.Chart.AppVersion -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}

{{/* kube-scheduler's image: the cluster's vMAJOR.MINOR.PATCH unless a tag is set. */}}
{{- define "tessera.kubeScheduler.image" -}}
{{- $tag := .Values.kubeScheduler.image.tag -}}
{{- if not $tag -}}
{{- $tag = regexFind "^v[0-9]+\\.[0-9]+\\.[0-9]+" .Capabilities.KubeVersion.Version -}}
{{- if not $tag -}}
{{- fail (printf "kubeScheduler.image.tag: empty, and the cluster's version %q is not vMAJOR.MINOR.PATCH; set kubeScheduler.image.tag to the kube-scheduler release matching the API server (e.g. v1.36.3)" .Capabilities.KubeVersion.Version) -}}
{{- end -}}
{{- end -}}
{{- printf "%s:%s" .Values.kubeScheduler.image.repository $tag -}}
{{- end -}}

{{/* The webhooks' TLS mode after "auto" is resolved: self-signed, cert-manager or secret. */}}
{{- define "tessera.tlsMode" -}}
{{- $mode := .Values.webhooks.tls.mode -}}
{{- if eq $mode "auto" -}}
{{- if .Capabilities.APIVersions.Has "cert-manager.io/v1" -}}cert-manager{{- else -}}self-signed{{- end -}}
{{- else -}}
{{- $mode -}}
{{- end -}}
{{- end -}}

{{/* The DNS names the webhook Service answers to. */}}
{{- define "tessera.webhook.dnsNames" -}}
{{- $svc := include "tessera.webhook.service" . -}}
{{- $ns := .Release.Namespace -}}
{{- list $svc (printf "%s.%s" $svc $ns) (printf "%s.%s.svc" $svc $ns) (printf "%s.%s.svc.cluster.local" $svc $ns) | toJson -}}
{{- end -}}

{{/* HOST:PORT, brackets around an IPv6 host. */}}
{{- define "tessera.hostPort" -}}
{{- if contains ":" .host -}}[{{ .host }}]:{{ .port }}{{- else -}}{{ .host }}:{{ .port }}{{- end -}}
{{- end -}}

{{/* The three Kubernetes PriorityClass names the policy maps tessera priorities to. */}}
{{- define "tessera.priorityClassNames" -}}
{{- $pc := dict -}}
{{- if .Values.policy -}}{{- $pc = .Values.policy.priorityClasses | default dict -}}{{- end -}}
{{- dict "latencyCritical" (get $pc "latency-critical" | default "tessera-latency-critical") "normal" (get $pc "normal" | default "tessera-normal") "bestEffort" (get $pc "best-effort" | default "tessera-best-effort") | toJson -}}
{{- end -}}

{{/* Where the containers find what the chart mounts. */}}
{{- define "tessera.paths.policy" -}}/etc/tessera/policy/policy.yaml{{- end -}}
{{- define "tessera.paths.signingKeyDir" -}}/etc/tessera/signing-key{{- end -}}
{{- define "tessera.paths.tlsDir" -}}/etc/tessera/tls{{- end -}}
{{- define "tessera.paths.decisionKeysDir" -}}/etc/tessera/keys{{- end -}}
{{- define "tessera.paths.kubeSchedulerConfig" -}}/etc/tessera/kube-scheduler/config.yaml{{- end -}}

{{/* One webhook entry's shared fields: call with (dict "root" $ "path" "/mutate" "caBundle" B64). */}}
{{- define "tessera.webhook.common" -}}
clientConfig:
  service:
    name: {{ include "tessera.webhook.service" .root }}
    namespace: {{ .root.Release.Namespace }}
    path: {{ .path }}
    port: 443
  {{- if .caBundle }}
  caBundle: {{ .caBundle }}
  {{- end }}
admissionReviewVersions: [v1]
sideEffects: None
failurePolicy: {{ .root.Values.webhooks.failurePolicy }}
timeoutSeconds: {{ .root.Values.webhooks.timeoutSeconds }}
namespaceSelector:
  matchExpressions:
    - key: kubernetes.io/metadata.name
      operator: NotIn
      values:
        {{- toYaml (prepend .root.Values.webhooks.excludeNamespaces .root.Release.Namespace | uniq) | nindent 8 }}
    {{- with .root.Values.webhooks.namespaceSelectorExpressions }}
    {{- toYaml . | nindent 4 }}
    {{- end }}
{{- end }}
