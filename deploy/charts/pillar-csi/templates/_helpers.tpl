{{/*
Name prefix of every object. One release per cluster: the CSIDriver, the
CRDs and the PillarAgents are cluster-wide.
*/}}
{{- define "pillar-csi.fullname" -}}
{{- if contains "pillar-csi" .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-pillar-csi" .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "pillar-csi.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: pillar-csi
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* Selector labels of one component: pass (list $ "controller"). */}}
{{- define "pillar-csi.selectorLabels" -}}
app.kubernetes.io/name: pillar-csi
app.kubernetes.io/instance: {{ (index . 0).Release.Name }}
app.kubernetes.io/component: {{ index . 1 }}
{{- end -}}

{{/* Image reference: pass (list $ .Values.x.image). With a digest the
image is pulled by it: what was pushed, whatever the tag says now. */}}
{{- define "pillar-csi.image" -}}
{{- $root := index . 0 -}}
{{- $img := index . 1 -}}
{{- if $img.digest -}}
{{- printf "%s@%s" $img.repository $img.digest -}}
{{- else -}}
{{- printf "%s:%s" $img.repository (default $root.Chart.AppVersion $img.tag) -}}
{{- end -}}
{{- end -}}

{{- define "pillar-csi.controllerName" -}}
{{ include "pillar-csi.fullname" . }}-controller
{{- end -}}
{{- define "pillar-csi.agentName" -}}
{{ include "pillar-csi.fullname" . }}-agent
{{- end -}}
{{- define "pillar-csi.nodeName" -}}
{{ include "pillar-csi.fullname" . }}-node
{{- end -}}

{{/* Secret with the installation's agent token (agentauth). */}}
{{- define "pillar-csi.agentTokenSecret" -}}
{{- .Values.agent.auth.existingSecret | default (printf "%s-agent-token" (include "pillar-csi.fullname" .)) -}}
{{- end -}}

{{/* host:port the agent binds, from agent.bindAddress or the node's own address. */}}
{{- define "pillar-csi.agentBind" -}}
{{- $ctx := index . 0 -}}{{- $port := index . 1 -}}
{{- $a := $ctx.Values.agent.bindAddress | default "$(HOST_IP)" -}}
{{- if or (eq $a "$(HOST_IP)") (contains ":" $a) -}}
[{{ $a }}]:{{ $port }}
{{- else -}}
{{ $a }}:{{ $port }}
{{- end -}}
{{- end -}}

{{/* Secret with the serving certificate every agent shares: only
tls.secret.agentSecretName under tls.mode secret. "" without mTLS and
wherever each storage node has its own (pillar-csi.agentPerNode). */}}
{{- define "pillar-csi.agentTLSSecret" -}}
{{- if eq .Values.tls.mode "secret" -}}
{{ .Values.tls.secret.agentSecretName }}
{{- end -}}
{{- end -}}

{{/* "true" when each storageNodes entry gets its own agent DaemonSet and
serving certificate: tls.mode generated and certManager always, secret
unless one Secret for all (tls.secret.agentSecretName) is given. Fails on
entries that cannot have one. */}}
{{- define "pillar-csi.agentPerNode" -}}
{{- $mode := .Values.tls.mode -}}
{{- $shared := and (eq $mode "secret") .Values.tls.secret.agentSecretName -}}
{{- range .Values.storageNodes }}
{{- if and .agentSecretName (ne $mode "secret") }}
{{- fail (printf "storageNodes entry %q has an agentSecretName, which only tls.mode secret uses (tls.mode is %s)" .name $mode) }}
{{- end }}
{{- if and .agentSecretName $shared }}
{{- fail (printf "tls.mode secret: storageNodes entry %q has its own agentSecretName and tls.secret.agentSecretName is set too: give each node its own Secret, or one for all" .name) }}
{{- end }}
{{- end }}
{{- if and (has $mode (list "generated" "certManager" "secret")) (not $shared) }}
{{- if not .Values.storageNodes }}
{{- if eq $mode "secret" }}
{{- fail "tls.mode secret: list the storage nodes in storageNodes, each with its agentSecretName (or set tls.secret.agentSecretName, one Secret for all)" }}
{{- end }}
{{- fail (printf "tls.mode %s: list the storage nodes in storageNodes; each gets its own serving certificate and agent DaemonSet" $mode) }}
{{- end }}
{{- range .Values.storageNodes }}
{{- if not .nodeName }}
{{- fail (printf "tls.mode %s: storageNodes entry %q has no nodeName: its agent DaemonSet and certificate are made for that node" $mode .name) }}
{{- end }}
{{- if and (eq $mode "secret") (not .agentSecretName) }}
{{- fail (printf "tls.mode secret: storageNodes entry %q has no agentSecretName, the Secret with its serving certificate (or set tls.secret.agentSecretName, one Secret for all)" .name) }}
{{- end }}
{{- end -}}
true
{{- end -}}
{{- end -}}

{{/* Secret with one storage node's serving certificate under tls.mode
generated and certManager: pass (list $ nodeName). */}}
{{- define "pillar-csi.agentNodeTLSSecret" -}}
{{- printf "%s-agent-tls-%s" (include "pillar-csi.fullname" (index . 0)) (index . 1) | trunc 253 | trimSuffix "-" | trimSuffix "." -}}
{{- end -}}

{{/* The agent DaemonSet of one storage node where each has its own
(pillar-csi.agentPerNode): pass (list $ nodeName). Names longer than 63
characters end in a hash of the node's name, so that two long node names
never give one name. */}}
{{- define "pillar-csi.agentNodeName" -}}
{{- $n := printf "%s-%s" (include "pillar-csi.agentName" (index . 0)) (index . 1) -}}
{{- if le (len $n) 63 -}}
{{ $n }}
{{- else -}}
{{ printf "%s-%s" ($n | trunc 54 | trimSuffix "-" | trimSuffix ".") (sha256sum (index . 1) | trunc 8) }}
{{- end -}}
{{- end -}}

{{/* The value of the label pillar-csi.io/storage-node that tells one
storage node's agent pods from another's: the node's name, or a hash of
it when it is longer than a label value may be. Pass the node's name. */}}
{{- define "pillar-csi.storageNodeLabel" -}}
{{- if le (len .) 63 -}}
{{ . }}
{{- else -}}
{{ printf "h-%s" (sha256sum . | trunc 40) }}
{{- end -}}
{{- end -}}

{{/* Secret with the controller's client certificate, or "" without mTLS. */}}
{{- define "pillar-csi.controllerTLSSecret" -}}
{{- if or (eq .Values.tls.mode "certManager") (eq .Values.tls.mode "generated") -}}
{{ include "pillar-csi.fullname" . }}-controller-client-tls
{{- else if eq .Values.tls.mode "secret" -}}
{{ required "tls.secret.controllerSecretName is required when tls.mode is secret" .Values.tls.secret.controllerSecretName }}
{{- end -}}
{{- end -}}

{{/* True (non-empty) when an address is an IP address rather than a DNS name. */}}
{{- define "pillar-csi.isIP" -}}
{{- if or (regexMatch "^[0-9.]+$" .) (contains ":" .) }}true{{ end -}}
{{- end -}}

{{/*
The namespaces whose Secrets pillar-controller reads, for the agents' TLS
(comma-separated): controller.tlsSecretNamespaces, else the release
namespace when tls.mode is not none, else none. The controller's flag and
the Roles that let it read Secrets there both come from this.
*/}}
{{- define "pillar-csi.secretNamespaces" -}}
{{- if .Values.controller.tlsSecretNamespaces -}}
{{- join "," .Values.controller.tlsSecretNamespaces -}}
{{- else if ne .Values.tls.mode "none" -}}
{{- .Release.Namespace -}}
{{- end -}}
{{- end -}}

{{- /*
pillar-csi.snapshotsServed: "true" when the cluster serves the snapshot
API (snapshot.storage.k8s.io/v1, the external-snapshotter's CRDs), as
helm install finds it; helm template knows only what --api-versions says.
*/ -}}
{{- define "pillar-csi.snapshotsServed" -}}
{{- .Capabilities.APIVersions.Has "snapshot.storage.k8s.io/v1/VolumeSnapshotClass" -}}
{{- end -}}

{{- /*
pillar-csi.decide: a value that is "auto", true or false, decided: list of
the root context and the value; "auto" is whether the snapshot API is served.
*/ -}}
{{- define "pillar-csi.decide" -}}
{{- $v := toString (index . 1) -}}
{{- if eq $v "auto" -}}
{{- include "pillar-csi.snapshotsServed" (index . 0) -}}
{{- else -}}
{{- eq $v "true" -}}
{{- end -}}
{{- end -}}
