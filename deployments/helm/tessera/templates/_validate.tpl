{{/*
Checks of value combinations that values.schema.json cannot express. Each failure names the
value and the accepted form; rendering stops at the first one (templates/validate.yaml).
*/}}
{{- define "tessera.validate" -}}
{{- if not (hasKey . "tesseraValidated") -}}
{{- $_ := set . "tesseraValidated" true -}}
{{- $v := .Values -}}

{{/* The scheduler: one active kube-scheduler at a time. */}}
{{- if and (gt (int $v.scheduler.replicas) 1) (not $v.scheduler.leaderElection.enabled) -}}
{{- fail (printf "scheduler.replicas: %d replicas need scheduler.leaderElection.enabled: true (without it every replica's kube-scheduler places pods on its own books and GPUs are over-committed); accepted: replicas 1, or leaderElection.enabled true" (int $v.scheduler.replicas)) -}}
{{- end -}}
{{- $le := $v.scheduler.leaderElection -}}
{{- if and $le.enabled (or (ge (int $le.retryPeriodSeconds) (int $le.renewDeadlineSeconds)) (ge (int $le.renewDeadlineSeconds) (int $le.leaseDurationSeconds))) -}}
{{- fail (printf "scheduler.leaderElection: need retryPeriodSeconds < renewDeadlineSeconds < leaseDurationSeconds (got %d, %d, %d)" (int $le.retryPeriodSeconds) (int $le.renewDeadlineSeconds) (int $le.leaseDurationSeconds)) -}}
{{- end -}}
{{- if eq $v.scheduler.schedulerName "default-scheduler" -}}
{{- fail "scheduler.schedulerName: default-scheduler is the cluster's own scheduler; the chart's kube-scheduler would compete with it for every pod; accepted: another name (tessera)" -}}
{{- end -}}
{{- $ports := list (int $v.scheduler.extenderPort) (int $v.webhooks.port) (int $v.kubeScheduler.securePort) -}}
{{- if ne (len (uniq $ports)) 3 -}}
{{- fail (printf "scheduler.extenderPort, webhooks.port, kubeScheduler.securePort: %d, %d and %d share one pod, so they must differ" (int $v.scheduler.extenderPort) (int $v.webhooks.port) (int $v.kubeScheduler.securePort)) -}}
{{- end -}}

{{/* The policy file: what the binaries would refuse at start. */}}
{{- if $v.policy -}}
{{- if ne (toString (get $v.policy "version")) "v1" -}}
{{- fail (printf "policy.version: %q; accepted: v1 (the policy file's format, api/config/v1/policy.example.yaml)" (toString (get $v.policy "version" | default ""))) -}}
{{- end -}}
{{- $ta := get $v.policy "tierAssignment" | default dict -}}
{{- if eq (toString (get $ta "honorNamespaceLabel")) "true" -}}
{{- fail "policy.tierAssignment.honorNamespaceLabel: true is not supported by tessera-scheduler yet (it does not watch Namespaces, and falling back to the default tier would fail open); accepted: false, with namespaces mapped in policy.tierAssignment.namespaces" -}}
{{- end -}}
{{- end -}}

{{/* Webhook TLS. */}}
{{- $tls := $v.webhooks.tls -}}
{{- if and (eq $tls.mode "cert-manager") (not (.Capabilities.APIVersions.Has "cert-manager.io/v1")) (not $tls.certManager.force) -}}
{{- fail "webhooks.tls.mode: cert-manager, but the cluster does not serve the cert-manager.io/v1 API; install cert-manager, or accepted: mode auto or self-signed, or webhooks.tls.certManager.force: true (e.g. helm template without --api-versions cert-manager.io/v1)" -}}
{{- end -}}
{{- if eq $tls.mode "secret" -}}
{{- if not (trim $tls.existingSecret) -}}
{{- fail "webhooks.tls.existingSecret: empty, but webhooks.tls.mode is secret; accepted: the name of a kubernetes.io/tls Secret in the release namespace" -}}
{{- end -}}
{{- if not (contains "-----BEGIN CERTIFICATE-----" $tls.caBundle) -}}
{{- fail "webhooks.tls.caBundle: webhooks.tls.mode secret needs the CA that signed the Secret's certificate; accepted: PEM (-----BEGIN CERTIFICATE-----)" -}}
{{- end -}}
{{- else -}}
{{- if or $tls.existingSecret $tls.caBundle -}}
{{- fail (printf "webhooks.tls.existingSecret, webhooks.tls.caBundle: used only with webhooks.tls.mode: secret (mode is %s); accepted: mode secret, or both empty" $tls.mode) -}}
{{- end -}}
{{- end -}}
{{- if and $tls.certManager.issuerRef (not $tls.certManager.issuerRef.name) -}}
{{- fail "webhooks.tls.certManager.issuerRef.name: empty; accepted: {name: ISSUER, kind: Issuer|ClusterIssuer}, or issuerRef: {} for a self-signed Issuer made by the chart" -}}
{{- end -}}

{{/* The decision-signing key. */}}
{{- $sk := $v.signingKey -}}
{{- if $sk.create -}}
{{- if $sk.existingSecret -}}
{{- fail (printf "signingKey.existingSecret: %q is used only with signingKey.create: false; accepted: create false with existingSecret, or create true with existingSecret empty" $sk.existingSecret) -}}
{{- end -}}
{{- if $sk.publicKey -}}
{{- fail "signingKey.publicKey: set, but signingKey.create: true generates the key (and its public key); accepted: create false with existingSecret and publicKey, or publicKey empty" -}}
{{- end -}}
{{- else -}}
{{- if not (trim $sk.existingSecret) -}}
{{- fail "signingKey.existingSecret: empty, but signingKey.create is false; accepted: the name of a Secret in the release namespace holding the Ed25519 private key (PEM) under signingKey.secretKey" -}}
{{- end -}}
{{- if and $sk.publicKey (not (contains "-----BEGIN PUBLIC KEY-----" $sk.publicKey)) -}}
{{- fail "signingKey.publicKey: not a PEM public key; accepted: -----BEGIN PUBLIC KEY----- ... (openssl pkey -in key.pem -pubout)" -}}
{{- end -}}
{{- end -}}

{{/* The node agent. */}}
{{- if and $v.node.enabled $v.node.driver.mountLibDir -}}
{{- $libDir := trimSuffix "/" $v.node.driver.libDir -}}
{{- if has $libDir (list "/lib" "/lib64" "/usr/lib" "/usr/lib64" "/lib/x86_64-linux-gnu" "/usr/lib/x86_64-linux-gnu" "/lib/aarch64-linux-gnu" "/usr/lib/aarch64-linux-gnu" "/usr/local/lib") -}}
{{- fail (printf "node.driver.mountLibDir: true would mount the node's %s over the agent image's own libraries; accepted: mountLibDir false (the runtime provides the driver), or a driver folder of its own (e.g. /run/nvidia/driver/usr/lib/x86_64-linux-gnu)" $libDir) -}}
{{- end -}}
{{- end -}}

{{/* Images: the tag after defaulting. */}}
{{- range $component := list "scheduler" "node" -}}
{{- $image := get (get $v $component) "image" -}}
{{- if not ($image.tag | default $.Chart.AppVersion) -}}
{{- fail (printf "%s.image.tag: empty and the chart has no appVersion; accepted: an image tag (e.g. 0.1.0)" $component) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
