{{/*
The chart renders the kustomize base's own files (files/ links to deploy/):
each object as the file holds it, changed only where a value says so. These
helpers say what changes.
*/}}

{{/* What every object's name starts with instead of "selftaint". */}}
{{- define "selftaint.fullname" -}}
{{- .Values.fullnameOverride | default .Values.nameOverride | default "selftaint" -}}
{{- end -}}

{{/* A name from the base, with its "selftaint" prefix renamed: (list $ name). */}}
{{- define "selftaint.rename" -}}
{{- regexReplaceAll "^selftaint" (index . 1) (include "selftaint.fullname" (index . 0)) -}}
{{- end -}}

{{/* config.yaml: the config value, or the base's. */}}
{{- define "selftaint.config" -}}
{{- $c := .Values.config -}}
{{- if kindIs "map" $c -}}
{{- toYaml $c -}}
{{- else if $c -}}
{{- $c -}}
{{- else -}}
{{- $base := .Files.Get "files/configmap.yaml" | fromYaml -}}
{{- index $base.data "config.yaml" -}}
{{- end -}}
{{- end -}}

{{/*
The guard ConfigMap's name: the config's coordinator.guard.name, which the
agents' and the coordinator's RBAC and the coordinator's policy must name.
*/}}
{{- define "selftaint.guard" -}}
{{- $cfg := include "selftaint.config" . | fromYaml -}}
{{- if hasKey $cfg "Error" -}}
{{- fail (printf "config: not YAML: %s" $cfg.Error) -}}
{{- end -}}
{{- $ns := dig "coordinator" "namespace" "" $cfg -}}
{{- if and $ns (ne $ns .Values.namespace) -}}
{{- fail (printf "config: coordinator.namespace %s: the coordinator may write only in its own namespace %s (coordinator-policy.yaml): leave it unset" $ns .Values.namespace) -}}
{{- end -}}
{{- dig "coordinator" "guard" "name" "selftaint-guard" $cfg -}}
{{- end -}}

{{/* The agent's policy parameters: the policyParams value as a map. */}}
{{- define "selftaint.policyParams" -}}
{{- $p := .Values.policyParams -}}
{{- if kindIs "string" $p -}}
{{- $p = fromYaml $p -}}
{{- if hasKey $p "Error" -}}
{{- fail (printf "policyParams: not YAML (the output of selftaint policy-params): %s" $p.Error) -}}
{{- end -}}
{{- end -}}
{{- $known := list "agent.selftaint.io/owned-taints" "agent.selftaint.io/owned-labels" "agent.selftaint.io/owned-conditions" "agent.selftaint.io/owned-resources" -}}
{{- range $k, $v := $p -}}
{{- if not (has $k $known) -}}
{{- fail (printf "policyParams: %s is not a parameter (%s)" $k (join ", " $known)) -}}
{{- end -}}
{{- if not (kindIs "string" $v) -}}
{{- fail (printf "policyParams: %s is not a string (one name per line)" $k) -}}
{{- end -}}
{{- end -}}
{{- /* toYaml drops the last line break: a last block scalar would lose its own. */ -}}
{{- printf "%s\n" (toYaml $p) -}}
{{- end -}}

{{/*
selftaint.transform changes one object of the base in place for the values:
(dict "obj" OBJ "ctx" $). The base's objects are named selftaint*, in
namespace selftaint (the Events Roles in default, which stay there).
*/}}
{{- define "selftaint.transform" -}}
{{- $o := .obj -}}
{{- $ctx := .ctx -}}
{{- $ns := $ctx.Values.namespace -}}
{{- $full := include "selftaint.fullname" $ctx -}}
{{- $m := $o.metadata -}}
{{- $orig := $m.name -}}
{{- if eq $o.kind "Namespace" -}}
{{- $_ := set $m "name" $ns -}}
{{- else -}}
{{- $_ := set $m "name" (include "selftaint.rename" (list $ctx $m.name)) -}}
{{- end -}}
{{- if eq ($m.namespace | default "") "selftaint" -}}
{{- $_ := set $m "namespace" $ns -}}
{{- end -}}
{{- /* RBAC: bindings' subjects and roles, rules naming objects. */ -}}
{{- range $s := $o.subjects -}}
{{- $_ := set $s "name" (include "selftaint.rename" (list $ctx $s.name)) -}}
{{- if eq ($s.namespace | default "") "selftaint" -}}
{{- $_ := set $s "namespace" $ns -}}
{{- end -}}
{{- end -}}
{{- with $o.roleRef -}}
{{- $_ := set . "name" (include "selftaint.rename" (list $ctx .name)) -}}
{{- end -}}
{{- range $r := $o.rules -}}
{{- if $r.resourceNames -}}
{{- $names := list -}}
{{- range $n := $r.resourceNames -}}
{{- if eq $n "selftaint-guard" -}}
{{- $names = append $names (include "selftaint.guard" $ctx) -}}
{{- else -}}
{{- $names = append $names (include "selftaint.rename" (list $ctx $n)) -}}
{{- end -}}
{{- end -}}
{{- $_ := set $r "resourceNames" $names -}}
{{- end -}}
{{- end -}}
{{- /* The config. */ -}}
{{- if and (eq $o.kind "ConfigMap") (eq $orig "selftaint-config") -}}
{{- $_ := set $o.data "config.yaml" (include "selftaint.config" $ctx) -}}
{{- end -}}
{{- /* Pods: their service account, config, image; the coordinator's replicas. */ -}}
{{- if has $o.kind (list "DaemonSet" "Deployment") -}}
{{- $pod := $o.spec.template.spec -}}
{{- $_ := set $pod "serviceAccountName" (include "selftaint.rename" (list $ctx $pod.serviceAccountName)) -}}
{{- range $v := $pod.volumes -}}
{{- with $v.configMap -}}
{{- $_ := set . "name" (include "selftaint.rename" (list $ctx .name)) -}}
{{- end -}}
{{- end -}}
{{- range $c := $pod.containers -}}
{{- $_ := set $c "image" (printf "%s:%s" $ctx.Values.image.repository ($ctx.Values.image.tag | default $ctx.Chart.AppVersion)) -}}
{{- with $ctx.Values.image.pullPolicy -}}
{{- $_ := set $c "imagePullPolicy" . -}}
{{- end -}}
{{- if and (eq $o.kind "DaemonSet") (ne $full "selftaint") -}}
{{- /* The agent reads the policy that confines it at start-up. */ -}}
{{- $_ := set $c "args" (append $c.args (printf "--admission-policy=%s-own-node" $full)) -}}
{{- end -}}
{{- end -}}
{{- if eq $o.kind "Deployment" -}}
{{- $_ := set $o.spec "replicas" (int $ctx.Values.coordinator.replicas) -}}
{{- end -}}
{{- if $ctx.Values.config -}}
{{- /* selftaint reads its config once: a changed config rolls the pods. */ -}}
{{- $tm := $o.spec.template.metadata -}}
{{- $_ := set $tm "annotations" (merge (dict "checksum/config" (include "selftaint.config" $ctx | sha256sum)) ($tm.annotations | default dict)) -}}
{{- end -}}
{{- end -}}
{{- /* Admission policies: the service accounts they match, their parameters. */ -}}
{{- if eq $o.kind "ValidatingAdmissionPolicy" -}}
{{- range $c := $o.spec.matchConditions -}}
{{- $_ := set $c "expression" (regexReplaceAll ":selftaint(-coordinator)?'\\)" $c.expression (printf ":%s${1}')" $full)) -}}
{{- end -}}
{{- if eq $orig "selftaint-own-node" -}}
{{- $params := include "selftaint.policyParams" $ctx | fromYaml -}}
{{- if $params -}}
{{- $_ := set $m "annotations" (merge $params (omit $m.annotations "agent.selftaint.io/owned-taints" "agent.selftaint.io/owned-labels" "agent.selftaint.io/owned-conditions" "agent.selftaint.io/owned-resources")) -}}
{{- end -}}
{{- end -}}
{{- if hasKey ($m.annotations | default dict) "coordinator.selftaint.io/guard" -}}
{{- $_ := set $m.annotations "coordinator.selftaint.io/guard" (include "selftaint.guard" $ctx) -}}
{{- end -}}
{{- end -}}
{{- if eq $o.kind "ValidatingAdmissionPolicyBinding" -}}
{{- $_ := set $o.spec "policyName" (include "selftaint.rename" (list $ctx $o.spec.policyName)) -}}
{{- with $o.spec.paramRef -}}
{{- $_ := set . "name" (include "selftaint.rename" (list $ctx .name)) -}}
{{- end -}}
{{- end -}}
{{- /* Monitoring: the namespace scraped. */ -}}
{{- with $o.spec -}}
{{- with .namespaceSelector -}}
{{- $matched := list -}}
{{- range $n := .matchNames -}}
{{- $matched = append $matched (ternary $ns $n (eq $n "selftaint")) -}}
{{- end -}}
{{- $_ := set . "matchNames" $matched -}}
{{- end -}}
{{- end -}}
{{- end -}}
