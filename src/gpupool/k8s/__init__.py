"""Kubernetes without a gpupool server in the path: manifests rendered from the cluster
configuration (namespaces, RBAC, network policies, Kueue objects) and the admission webhook that
stamps each pod with its user's POSIX identity. Rendering and admission decisions are pure;
``webhook_server`` is the only module here that does I/O."""
