{{/* Names and labels ---------------------------------------------------------------------- */}}

{{- define "revive.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "revive.fullname" -}}
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

{{- define "revive.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "revive.selectorLabels" -}}
app.kubernetes.io/name: {{ include "revive.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "revive.labels" -}}
helm.sh/chart: {{ include "revive.chart" . }}
{{ include "revive.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: revive
{{- end -}}

{{- define "revive.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "revive.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "revive.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) -}}
{{- end -}}

{{/* Fixed paths inside the containers -------------------------------------------------------- */}}

{{- define "revive.configDir" -}}/etc/revive/config{{- end -}}
{{- define "revive.secretsDir" -}}/etc/revive/secrets{{- end -}}
{{- define "revive.slurmConfPath" -}}/etc/slurm/slurm.conf{{- end -}}

{{/* cluster.yaml ------------------------------------------------------------------------------
     `.Values.cluster` with the paths of the mounted secrets, the Temporal section and the
     state paths set by the chart. Fails on anything that would inline a secret or point a
     secret field somewhere the chart does not mount. */}}
{{- define "revive.clusterConfig" -}}
{{- $c := deepCopy (.Values.cluster | default dict) -}}
{{- $sec := .Values.secrets -}}
{{- $dir := include "revive.secretsDir" . -}}
{{- range $k := list "audit_file" "state_dir" "temporal" -}}
{{- if hasKey $c $k -}}
{{- fail (printf "cluster.%s is set by the chart (see `temporal` and `persistence` in values.yaml); remove it" $k) -}}
{{- end -}}
{{- end -}}
{{- $sched := deepCopy (get $c "scheduler" | default dict) -}}
{{- $mode := get $sched "mode" | default "local" -}}
{{- if and (eq $mode "ssh") (not (get $sched "ssh")) -}}
{{- fail "cluster.scheduler.mode is ssh: cluster.scheduler.ssh (host, user) is required" -}}
{{- end -}}
{{- with get $sched "ssh" -}}
{{- $ssh := deepCopy . -}}
{{- range $k := list "key_file" "key_env" "known_hosts" -}}
{{- if hasKey $ssh $k -}}
{{- fail (printf "cluster.scheduler.ssh.%s: set by the chart; reference an existing Secret in secrets.sshKey / secrets.knownHosts" $k) -}}
{{- end -}}
{{- end -}}
{{- if not $sec.sshKey.existingSecret -}}
{{- fail "cluster.scheduler.ssh is set: secrets.sshKey.existingSecret (the Secret holding the private key) is required" -}}
{{- end -}}
{{- if not $sec.knownHosts.existingSecret -}}
{{- fail "cluster.scheduler.ssh is set: secrets.knownHosts.existingSecret is required (host keys are always verified)" -}}
{{- end -}}
{{- $_ := set $ssh "key_file" (printf "%s/ssh-key/%s" $dir $sec.sshKey.key) -}}
{{- $_ := set $ssh "known_hosts" (printf "%s/known-hosts/%s" $dir $sec.knownHosts.key) -}}
{{- $_ := set $sched "ssh" $ssh -}}
{{- end -}}
{{- with get $sched "rest" -}}
{{- $rest := deepCopy . -}}
{{- range $k := list "token_file" "token_env" -}}
{{- if hasKey $rest $k -}}
{{- fail (printf "cluster.scheduler.rest.%s: set by the chart; reference an existing Secret in secrets.slurmrestdToken" $k) -}}
{{- end -}}
{{- end -}}
{{- if not $sec.slurmrestdToken.existingSecret -}}
{{- fail "cluster.scheduler.rest is set: secrets.slurmrestdToken.existingSecret (the slurmrestd JWT) is required" -}}
{{- end -}}
{{- $_ := set $rest "token_file" (printf "%s/slurmrestd/%s" $dir $sec.slurmrestdToken.key) -}}
{{- $_ := set $sched "rest" $rest -}}
{{- end -}}
{{- $_ := set $c "scheduler" $sched -}}
{{- with get $c "attribution" -}}
{{- if or (hasKey . "token_file") (hasKey . "token_env") -}}
{{- fail "cluster.attribution.token_file/token_env: not supported by the chart yet (no Secret reference for it)" -}}
{{- end -}}
{{- end -}}
{{- if .Values.slurmClient.enabled -}}
{{- if ne $mode "local" -}}
{{- fail "slurmClient.enabled runs the Slurm CLI in the pod: it needs cluster.scheduler.mode local" -}}
{{- end -}}
{{- if hasKey $c "slurm_conf" -}}
{{- fail "cluster.slurm_conf is set by the chart from slurmClient.slurmConf; remove it" -}}
{{- end -}}
{{- if not .Values.slurmClient.slurmConf.existingConfigMap -}}
{{- fail "slurmClient.enabled: slurmClient.slurmConf.existingConfigMap (the ConfigMap holding slurm.conf) is required" -}}
{{- end -}}
{{- if not $sec.mungeKey.existingSecret -}}
{{- fail "slurmClient.enabled: secrets.mungeKey.existingSecret (the Secret holding munge.key) is required" -}}
{{- end -}}
{{- $_ := set $c "slurm_conf" (include "revive.slurmConfPath" .) -}}
{{- else if eq $mode "local" -}}
{{- fail "cluster.scheduler.mode local runs the Slurm CLI in the pod: set slurmClient.enabled (and build the image with SLURM_CLIENT=1)" -}}
{{- end -}}
{{- $t := dict "address" .Values.temporal.address "namespace" .Values.temporal.namespace "task_queue" .Values.temporal.task_queue -}}
{{- with $sec.temporalTls -}}
{{- if .existingSecret -}}
{{- $tls := dict "cert_file" (printf "%s/temporal-tls/%s" $dir .certKey) "key_file" (printf "%s/temporal-tls/%s" $dir .keyKey) -}}
{{- if .caKey -}}
{{- $_ := set $tls "ca_file" (printf "%s/temporal-tls/%s" $dir .caKey) -}}
{{- end -}}
{{- $_ := set $t "tls" $tls -}}
{{- end -}}
{{- end -}}
{{- $_ := set $c "temporal" $t -}}
{{- $_ := set $c "audit_file" (printf "%s/audit.jsonl" .Values.persistence.mountPath) -}}
{{- $_ := set $c "state_dir" (printf "%s/state" .Values.persistence.mountPath) -}}
{{- toYaml $c -}}
{{- end -}}

{{/* Volumes and mounts shared by worker and monitor ------------------------------------------ */}}

{{- define "revive.secretVolume" -}}
- name: {{ .name }}
  secret:
    secretName: {{ .secret }}
    defaultMode: 0440
    items:
      {{- range .keys }}
      - key: {{ . }}
        path: {{ . }}
      {{- end }}
{{- end -}}

{{- define "revive.volumes" -}}
{{- $sec := .Values.secrets -}}
{{- $sched := .Values.cluster.scheduler | default dict -}}
- name: config
  configMap:
    name: {{ include "revive.fullname" . }}-config
- name: tmp
  emptyDir: {}
{{- if get $sched "ssh" }}
{{ include "revive.secretVolume" (dict "name" "ssh-key" "secret" $sec.sshKey.existingSecret "keys" (list $sec.sshKey.key)) }}
{{ include "revive.secretVolume" (dict "name" "known-hosts" "secret" $sec.knownHosts.existingSecret "keys" (list $sec.knownHosts.key)) }}
{{- end }}
{{- if get $sched "rest" }}
{{ include "revive.secretVolume" (dict "name" "slurmrestd" "secret" $sec.slurmrestdToken.existingSecret "keys" (list $sec.slurmrestdToken.key)) }}
{{- end }}
{{- with $sec.temporalTls }}
{{- if .existingSecret }}
{{- $keys := list .certKey .keyKey }}
{{- if .caKey }}{{ $keys = append $keys .caKey }}{{ end }}
{{ include "revive.secretVolume" (dict "name" "temporal-tls" "secret" .existingSecret "keys" $keys) }}
{{- end }}
{{- end }}
{{- if .Values.slurmClient.enabled }}
{{ include "revive.secretVolume" (dict "name" "munge-key" "secret" $sec.mungeKey.existingSecret "keys" (list $sec.mungeKey.key)) }}
- name: munge-run
  emptyDir:
    medium: Memory
- name: slurm-conf
  configMap:
    name: {{ .Values.slurmClient.slurmConf.existingConfigMap }}
    items:
      - key: {{ .Values.slurmClient.slurmConf.key }}
        path: slurm.conf
{{- end }}
{{- with .Values.extraVolumes }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* The state volume: the worker's claim (or an emptyDir); monitors always get their own
     emptyDir (their state is the tail offsets cache, one per shard). */}}
{{- define "revive.stateVolume" -}}
- name: state
{{- if and .persistent .root.Values.persistence.existingClaim }}
  persistentVolumeClaim:
    claimName: {{ .root.Values.persistence.existingClaim }}
{{- else }}
  emptyDir: {}
{{- end }}
{{- end -}}

{{- define "revive.volumeMounts" -}}
{{- $sec := .Values.secrets -}}
{{- $sched := .Values.cluster.scheduler | default dict -}}
{{- $dir := include "revive.secretsDir" . -}}
- name: config
  mountPath: {{ include "revive.configDir" . }}
  readOnly: true
- name: tmp
  mountPath: /tmp
- name: state
  mountPath: {{ .Values.persistence.mountPath }}
{{- if get $sched "ssh" }}
- name: ssh-key
  mountPath: {{ $dir }}/ssh-key
  readOnly: true
- name: known-hosts
  mountPath: {{ $dir }}/known-hosts
  readOnly: true
{{- end }}
{{- if get $sched "rest" }}
- name: slurmrestd
  mountPath: {{ $dir }}/slurmrestd
  readOnly: true
{{- end }}
{{- if .Values.secrets.temporalTls.existingSecret }}
- name: temporal-tls
  mountPath: {{ $dir }}/temporal-tls
  readOnly: true
{{- end }}
{{- if .Values.slurmClient.enabled }}
- name: munge-key
  mountPath: {{ $dir }}/munge-key
  readOnly: true
- name: munge-run
  mountPath: /run/munge
- name: slurm-conf
  mountPath: {{ include "revive.slurmConfPath" . | dir }}
  readOnly: true
{{- end }}
{{- with .Values.extraVolumeMounts }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "revive.env" -}}
- name: HOME
  value: /tmp
- name: PYTHONDONTWRITEBYTECODE
  value: "1"
- name: PYTHONUNBUFFERED
  value: "1"
{{- if .Values.metrics.enabled }}
- name: REVIVE_METRICS_PORT
  value: {{ .Values.metrics.port | quote }}
{{- end }}
{{- with .Values.extraEnv }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{/* With the in-pod Slurm client, munged starts in the same container before `revive`
     (no sidecar). `--force` because a Secret volume is owned by root, not the pod's uid. */}}
{{- define "revive.command" -}}
{{- if .Values.slurmClient.enabled -}}
command:
  - /bin/sh
  - -ec
  - >-
    munged --force
    --key-file={{ include "revive.secretsDir" . }}/munge-key/{{ .Values.secrets.mungeKey.key }}
    --socket=/run/munge/munge.socket.2 --pid-file=/run/munge/munged.pid
    --seed-file=/run/munge/munged.seed --log-file=/run/munge/munged.log;
    exec revive "$@"
  - revive
{{- end -}}
{{- end -}}

{{- define "revive.metricsPort" -}}
{{- if .Values.metrics.enabled -}}
ports:
  - name: metrics
    containerPort: {{ .Values.metrics.port }}
    protocol: TCP
{{- end }}
{{- end -}}

{{- define "revive.podSpecCommon" -}}
serviceAccountName: {{ include "revive.serviceAccountName" . }}
automountServiceAccountToken: {{ .Values.serviceAccount.automountServiceAccountToken }}
{{- with .Values.imagePullSecrets }}
imagePullSecrets:
  {{- toYaml . | nindent 2 }}
{{- end }}
securityContext:
  {{- toYaml .Values.podSecurityContext | nindent 2 }}
{{- end -}}
