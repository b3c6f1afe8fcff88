// Package podrunner plays kubelet for one Node of a local control plane that has no
// kubelet, container runtime or scheduler: it registers the Node and keeps it Ready
// (status heartbeats and a Lease in kube-node-lease), binds unscheduled pods of the
// default scheduler to it, and runs each pod bound to it as local processes, one per
// container, reporting their status as kubelet would.
//
// What stands in for what:
//   - Images: the catalogue (package catalogue) maps an image's repository to a
//     program in the binary directory; the container's command is ignored, its args
//     are passed. A container whose image is not in the catalogue never starts: it
//     waits with reason ErrImagePull and its pod stays Pending.
//   - Pod network: each pod gets a loopback address from the pod IP range (package
//     ipam). A program that takes its address from a flag (engine-sim) is given
//     "<pod IP>:<port>". A program that binds wildcard addresses on ports named by
//     environment variables (echo-basic) is given free ports instead, and the ports it
//     would serve in a real pod are published on the pod IP and relayed to them (package
//     tcpforward). The host IP is 127.0.0.1.
//   - Volumes: secret, configMap, projected (secret and configMap sources) and emptyDir
//     volumes are directories under the pod's directory (package podconfig); other
//     kinds are empty directories. Processes see the host's file system, so every env
//     value and arg that is a path under one of the container's mount paths is
//     rewritten to the same path under the directory that stands in for the volume; a
//     workingDir under a mount is rewritten the same way, any other runs in the pod
//     directory. Each pod's directory is <state dir>/<namespace>_<name>_<uid>.
//   - Logs: each container's stdout and stderr go to <container>.log in the pod's
//     directory, in the CRI log format kubelet reads (a timestamp, the stream and a
//     partial/full tag per line); a restart keeps the previous run's log as
//     <container>.log.1. An HTTPS endpoint (Options.KubeletAddr, self-signed) serves
//     them as kubelet's GET /containerLogs/{namespace}/{pod}/{container} does, with
//     follow, previous, timestamps, tailLines, limitBytes, sinceSeconds, sinceTime and
//     stream, and the Node advertises it (InternalIP and daemonEndpoints), so that the
//     API server's pods/log subresource and kubectl logs work. It serves nothing else,
//     and without Options.KubeletClientCAs it serves anyone who reaches it: the API
//     server of a local control plane verifies neither side of that connection.
//   - Readiness: readinessProbe httpGet and tcpSocket are run against the pod IP;
//     without one (or with an exec or grpc probe, which are not run) a container is
//     ready once every port it serves accepts connections on the pod IP. Liveness and
//     startup probes are not run.
//   - Restarts follow the pod's restartPolicy with a back-off of 1s doubling up to
//     10s; exits with a non-zero code record the end of the run's log (80 lines, 2048
//     bytes at most) as their termination message.
//
// Init containers are not run: a pod that has any stays Pending, Initialized=False.
// Deleting a pod stops its processes (SIGTERM to the process group, SIGKILL after the
// grace period, capped), frees its address, removes its directory and deletes the
// object with grace period 0 and a UID precondition. When the runner stops it stops
// every process it started and marks its Node NotReady. It never touches pods bound to
// another node.
//
// The runner runs programs as the user it runs as, without isolation: it is a tool for
// local development and tests, not a container runtime.
package podrunner
