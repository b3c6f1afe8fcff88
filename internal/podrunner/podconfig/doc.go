// Package podconfig turns a pod's spec into what a container's local process gets in
// place of a container runtime: its environment (env, envFrom, field references,
// Secret and ConfigMap keys, $(VAR) expansion) and its volumes, written as directories,
// with paths under a volume's mount path rewritten to the directory that stands in for
// it (a process sees the host's file system, not its mounts).
//
// It reads Secrets and ConfigMaps through the Objects it is given and writes only under
// the directory it is given; it starts no processes and writes nothing to the API
// server.
package podconfig
