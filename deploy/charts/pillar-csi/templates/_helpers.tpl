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

{{/* Secret with the agents' serving certificate, or "" without mTLS. */}}
{{- define "pillar-csi.agentTLSSecret" -}}
{{- if eq .Values.tls.mode "certManager" -}}
{{ include "pillar-csi.fullname" . }}-agent-tls
{{- else if eq .Values.tls.mode "secret" -}}
{{ required "tls.secret.agentSecretName is required when tls.mode is secret" .Values.tls.secret.agentSecretName }}
{{- end -}}
{{- end -}}

{{/* Secret with the controller's client certificate, or "" without mTLS. */}}
{{- define "pillar-csi.controllerTLSSecret" -}}
{{- if eq .Values.tls.mode "certManager" -}}
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
