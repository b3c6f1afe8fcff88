// Package modeladapter holds the ModelAdapter controller: it places a LoRA adapter on
// engine pods that serve the adapter's base model, loads it through each engine's admin API
// (internal/engineclient), confirms it through GET /v1/models, and reports the pods that
// serve it in status.instances with Scheduled and Ready conditions. A finalizer unloads the
// adapter from every engine before the ModelAdapter goes away.
//
// What the engines report wins over what the status claims: every reconcile asks each
// engine which adapters it holds, keeps the copies it finds, loads missing ones, unloads
// surplus ones, and lists only confirmed pods. Status.artifacts records which artifact each
// copy was loaded from; a copy of another artifact than spec.artifactURL is reloaded. A
// ModelAdapter is reconciled when it changes, when an engine pod serving its base model in
// its namespace changes, and periodically to notice changes made on the engines directly;
// several are reconciled at once, every engine call bounded by its own timeout. Nothing is
// loaded or unloaded while the pod view lags the informer's Pods (cache.PodsBehind), and a
// deleted ModelAdapter keeps its finalizer until every recorded pod's engine has answered
// or the pod is gone. The API server can carry out a delete that raced with the request
// adding the finalizer (kubernetes/kubernetes#77988): a ModelAdapter whose delete event
// carries the finalizer but no deletion timestamp left without finalize, and its copies
// are unloaded all the same, once the API server confirms it is gone.
//
// The package does not watch or mirror pods itself (it reads the metadata cache's pod view,
// PodReader), does not route requests, and does not write the metadata cache: the cache's
// own ModelAdapter feed picks up status.instances.
package modeladapter
