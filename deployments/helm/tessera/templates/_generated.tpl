{{/*
Key material the chart generates or reuses: the webhooks' self-signed CA and certificate, and
the decision-signing key with its public key. Computed once per render and cached in the root
context, so that the Secret and the webhook configurations (or the Secret and the node agents'
public key) always agree. Existing Secrets are reused (helm install/upgrade can look them up;
helm template cannot, and generates afresh).
*/}}

{{/* The public key (PEM SubjectPublicKeyInfo) of an Ed25519 private key (PEM PKCS#8).
Sprig has no public-key function, so: a throw-away self-signed certificate made with the key
carries its SubjectPublicKeyInfo, which for Ed25519 is always these 12 bytes followed by the
32-byte key (RFC 8410); that is cut out of the certificate's DER. */}}
{{- define "tessera.ed25519PublicKeyPem" -}}
{{- $cert := genSelfSignedCertWithKey "tessera-decision-key" nil nil 1 . -}}
{{- $der := regexReplaceAll "-----[A-Z ]+-----|\\s" $cert.Cert "" | b64dec -}}
{{- $prefix := "\x30\x2a\x30\x05\x06\x03\x2b\x65\x70\x03\x21\x00" -}}
{{- $parts := splitList $prefix $der -}}
{{- if or (ne (len $parts) 2) (lt (len (index $parts 1)) 32) -}}
{{- fail "signingKey: the private key is not an Ed25519 key; accepted: PEM PKCS#8 from `openssl genpkey -algorithm ed25519`" -}}
{{- end -}}
-----BEGIN PUBLIC KEY-----
{{ printf "%s%s" $prefix (substr 0 32 (index $parts 1)) | b64enc }}
-----END PUBLIC KEY-----
{{ end -}}

{{/* Everything generated, as a dict: webhookCa, webhookCert, webhookKey (mode self-signed),
signingKey (signingKey.create), publicKey. */}}
{{- define "tessera.generated" -}}
{{- include "tessera.validate" . -}}
{{- if not (hasKey . "tesseraGenerated") -}}
{{- $g := dict -}}
{{- $ns := .Release.Namespace -}}

{{- if eq (include "tessera.tlsMode" .) "self-signed" -}}
{{- $dns := include "tessera.webhook.dnsNames" . | fromJsonArray -}}
{{- $days := int .Values.webhooks.tls.selfSignedValidityDays -}}
{{- $old := lookup "v1" "Secret" $ns (include "tessera.webhook.tlsSecret" .) -}}
{{- $oldData := dict -}}
{{- $oldDns := "" -}}
{{- if $old -}}
{{- $oldData = $old.data | default dict -}}
{{- $oldDns = get ($old.metadata.annotations | default dict) "tessera.dev/webhook-dns-names" -}}
{{- end -}}
{{- if and (hasKey $oldData "ca.crt") (hasKey $oldData "tls.crt") (hasKey $oldData "tls.key") (eq $oldDns (join "," $dns)) -}}
{{- $_ := set $g "webhookCa" (get $oldData "ca.crt" | b64dec) -}}
{{- $_ := set $g "webhookCert" (get $oldData "tls.crt" | b64dec) -}}
{{- $_ := set $g "webhookKey" (get $oldData "tls.key" | b64dec) -}}
{{- else -}}
{{- $ca := genCA (printf "%s-webhook-ca" (include "tessera.fullname" .)) $days -}}
{{- $cert := genSignedCert (first $dns) nil $dns $days $ca -}}
{{- $_ := set $g "webhookCa" $ca.Cert -}}
{{- $_ := set $g "webhookCert" $cert.Cert -}}
{{- $_ := set $g "webhookKey" $cert.Key -}}
{{- end -}}
{{- end -}}

{{- if .Values.signingKey.create -}}
{{- $name := include "tessera.signingKey.secret" . -}}
{{- $old := lookup "v1" "Secret" $ns $name -}}
{{- if $old -}}
{{- $data := $old.data | default dict -}}
{{- if not (hasKey $data "signing-key.pem") -}}
{{- fail (printf "signingKey.create: the Secret %s/%s exists but holds no signing-key.pem; restore it, or delete it to have a new key generated (decisions of running pods then no longer verify)" $ns $name) -}}
{{- end -}}
{{- $_ := set $g "signingKey" (get $data "signing-key.pem" | b64dec) -}}
{{- else -}}
{{- $_ := set $g "signingKey" (genPrivateKey "ed25519") -}}
{{- end -}}
{{- $_ := set $g "publicKey" (include "tessera.ed25519PublicKeyPem" $g.signingKey) -}}
{{- else if .Values.signingKey.publicKey -}}
{{- $_ := set $g "publicKey" (printf "%s\n" (trim .Values.signingKey.publicKey)) -}}
{{- else -}}
{{- $name := .Values.signingKey.existingSecret -}}
{{- $old := lookup "v1" "Secret" $ns $name -}}
{{- $data := dict -}}
{{- if $old -}}{{- $data = $old.data | default dict -}}{{- end -}}
{{- if not (hasKey $data .Values.signingKey.secretKey) -}}
{{- fail (printf "signingKey.publicKey: required with signingKey.existingSecret when the chart cannot read %s/%s key %s (helm template, or the Secret is not there yet); accepted: the PEM public key, `openssl pkey -in key.pem -pubout`" $ns $name .Values.signingKey.secretKey) -}}
{{- end -}}
{{- $_ := set $g "publicKey" (include "tessera.ed25519PublicKeyPem" (get $data .Values.signingKey.secretKey | b64dec)) -}}
{{- end -}}

{{- $_ := set . "tesseraGenerated" $g -}}
{{- end -}}
{{- toJson (get . "tesseraGenerated") -}}
{{- end -}}
