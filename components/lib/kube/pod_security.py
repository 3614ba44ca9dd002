"""Pod Security Standards, level ``restricted``: the rules a namespace labelled
``pod-security.kubernetes.io/enforce: restricted`` applies to every pod, checked on a pod object.

Written from https://kubernetes.io/docs/concepts/security/pod-security-standards/ (the baseline controls,
which restricted includes, and the restricted ones; policy version "latest", Kubernetes 1.25+, Linux pods).
Used by the tests on every pod the stand-in controllers create, so a job ctpipe submits is known to start in
a restricted namespace, and a container an upstream controller adds that would not is named.
"""

from __future__ import annotations

from typing import Any

# Baseline: capabilities a container may add; restricted allows only NET_BIND_SERVICE.
RESTRICTED_ADDABLE_CAPABILITIES = {"NET_BIND_SERVICE"}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
RESTRICTED_VOLUME_TYPES = {
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
}
ALLOWED_SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def _containers(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{kind}[{c.get('name')}]", c)
        for kind in ("initContainers", "containers", "ephemeralContainers")
        for c in spec.get(kind) or []
    ]


def _baseline(spec: dict[str, Any]) -> list[str]:
    problems = [f"spec.{key}: must be unset or false" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    pod_sc = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or []:
        if "hostPath" in volume:
            problems.append(f"spec.volumes[{volume.get('name')}]: hostPath volumes are not allowed")
    for sysctl in pod_sc.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            problems.append(f"spec.securityContext.sysctls: {sysctl.get('name')!r} is not a safe sysctl")
    for where, sc in [("spec.securityContext", pod_sc)] + [(f"{w}.securityContext", c.get("securityContext") or {})
                                                              for w, c in _containers(spec)]:
        if (sc.get("seLinuxOptions") or {}).get("type", "") not in ALLOWED_SELINUX_TYPES:
            problems.append(f"{where}.seLinuxOptions.type: {sc['seLinuxOptions']['type']!r} is not allowed")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            problems.append(f"{where}.seccompProfile.type: Unconfined is not allowed")
        if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            problems.append(f"{where}.appArmorProfile.type: Unconfined is not allowed")
    for where, container in _containers(spec):
        sc = container.get("securityContext") or {}
        if sc.get("privileged"):
            problems.append(f"{where}.securityContext.privileged: must be unset or false")
        if sc.get("procMount", "Default") != "Default":
            problems.append(f"{where}.securityContext.procMount: must be Default")
        if sc.get("windowsOptions", {}).get("hostProcess"):
            problems.append(f"{where}.securityContext.windowsOptions.hostProcess: must be unset or false")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                problems.append(f"{where}.ports: hostPort {port['hostPort']} is not allowed")
    return problems


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """Every way ``pod`` (a Pod object, or its ``spec``) breaks Pod Security ``restricted``; empty when it passes."""
    spec = pod["spec"] if "spec" in pod else pod
    problems = _baseline(spec)
    pod_sc = spec.get("securityContext") or {}
    for volume in spec.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUME_TYPES:
            problems.append(f"spec.volumes[{volume.get('name')}]: volume type {sorted(kinds)} is not allowed")
    if pod_sc.get("runAsUser") == 0:
        problems.append("spec.securityContext.runAsUser: must not be 0")
    for where, container in _containers(spec):
        sc = container.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}.securityContext.allowPrivilegeEscalation: must be false")
        # Set on the container, or inherited from the pod.
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            problems.append(f"{where}.securityContext.runAsNonRoot: must be true (on the container or the pod)")
        if sc.get("runAsUser") == 0:
            problems.append(f"{where}.securityContext.runAsUser: must not be 0")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{where}.securityContext.seccompProfile.type: must be RuntimeDefault or Localhost "
                            "(on the container or the pod)")
        capabilities = sc.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"{where}.securityContext.capabilities.drop: must include ALL")
        added = set(capabilities.get("add") or []) - RESTRICTED_ADDABLE_CAPABILITIES
        if added:
            problems.append(f"{where}.securityContext.capabilities.add: {sorted(added)} not allowed (only NET_BIND_SERVICE)")
    return problems
