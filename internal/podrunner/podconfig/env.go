package podconfig

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Objects reads the Secrets and ConfigMaps a pod refers to. Errors that say the object
// does not exist must satisfy apierrors.IsNotFound.
type Objects interface {
	Secret(ctx context.Context, namespace, name string) (*corev1.Secret, error)
	ConfigMap(ctx context.Context, namespace, name string) (*corev1.ConfigMap, error)
}

// Pod is a pod as its field references see it: the object and the addresses the pod
// runner gave it, which its status may not show yet.
type Pod struct {
	*corev1.Pod
	PodIP, HostIP string
}

// Environment is an ordered set of environment variables: setting a variable again
// replaces its value and keeps its place.
type Environment struct {
	names  []string
	values map[string]string
}

// Set sets name to value.
func (e *Environment) Set(name, value string) {
	if e.values == nil {
		e.values = map[string]string{}
	}
	if _, ok := e.values[name]; !ok {
		e.names = append(e.names, name)
	}
	e.values[name] = value
}

// Lookup returns name's value and whether it is set.
func (e *Environment) Lookup(name string) (string, bool) {
	v, ok := e.values[name]
	return v, ok
}

// Get returns name's value, empty if it is unset.
func (e *Environment) Get(name string) string { return e.values[name] }

// Names returns the variables' names, in the order they were first set.
func (e *Environment) Names() []string { return append([]string(nil), e.names...) }

// List returns the variables as "NAME=value", in the order they were first set.
func (e *Environment) List() []string {
	list := make([]string, len(e.names))
	for i, n := range e.names {
		list[i] = n + "=" + e.values[n]
	}
	return list
}

// Env returns the environment of container c of pod as kubelet builds it: the
// variables of c's envFrom sources in order (keys that are not valid variable names
// are skipped), then c's env, each value with $(VAR) references to variables set
// before it expanded (see Expand). It fails, as kubelet's CreateContainerConfigError
// does, when a source that is not optional is missing or a field reference is not
// supported.
func Env(ctx context.Context, objs Objects, pod Pod, c *corev1.Container) (*Environment, error) {
	env := &Environment{}
	for _, from := range c.EnvFrom {
		data, err := envFromData(ctx, objs, pod.Namespace, from)
		if err != nil {
			return nil, err
		}
		for _, k := range sortedKeys(data) {
			if name := from.Prefix + k; len(validation.IsEnvVarName(name)) == 0 {
				env.Set(name, data[k])
			}
		}
	}
	for _, v := range c.Env {
		value := Expand(v.Value, env.Lookup)
		if v.ValueFrom != nil {
			var ok bool
			var err error
			if value, ok, err = valueFrom(ctx, objs, pod, v.ValueFrom); err != nil {
				return nil, fmt.Errorf("env %s: %w", v.Name, err)
			} else if !ok {
				continue // an optional key that is missing
			}
		}
		env.Set(v.Name, value)
	}
	return env, nil
}

// envFromData returns the keys and values of one envFrom source; a missing optional
// source has none.
func envFromData(ctx context.Context, objs Objects, ns string, from corev1.EnvFromSource) (map[string]string, error) {
	switch {
	case from.ConfigMapRef != nil:
		cm, err := configMap(ctx, objs, ns, from.ConfigMapRef.Name, from.ConfigMapRef.Optional)
		if err != nil || cm == nil {
			return nil, err
		}
		return cm.Data, nil
	case from.SecretRef != nil:
		s, err := secret(ctx, objs, ns, from.SecretRef.Name, from.SecretRef.Optional)
		if err != nil || s == nil {
			return nil, err
		}
		data := make(map[string]string, len(s.Data))
		for k, v := range s.Data {
			data[k] = string(v)
		}
		return data, nil
	}
	return nil, nil
}

// valueFrom resolves an env valueFrom; ok is false for an optional key that is missing.
func valueFrom(ctx context.Context, objs Objects, pod Pod, from *corev1.EnvVarSource) (value string, ok bool, err error) {
	switch {
	case from.FieldRef != nil:
		v, err := FieldValue(pod, from.FieldRef.FieldPath)
		return v, err == nil, err
	case from.ConfigMapKeyRef != nil:
		ref := from.ConfigMapKeyRef
		cm, err := configMap(ctx, objs, pod.Namespace, ref.Name, ref.Optional)
		if err != nil || cm == nil {
			return "", false, err
		}
		if v, ok := cm.Data[ref.Key]; ok {
			return v, true, nil
		}
		if isOptional(ref.Optional) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("couldn't find key %s in ConfigMap %s/%s", ref.Key, pod.Namespace, ref.Name)
	case from.SecretKeyRef != nil:
		ref := from.SecretKeyRef
		s, err := secret(ctx, objs, pod.Namespace, ref.Name, ref.Optional)
		if err != nil || s == nil {
			return "", false, err
		}
		if v, ok := s.Data[ref.Key]; ok {
			return string(v), true, nil
		}
		if isOptional(ref.Optional) {
			return "", false, nil
		}
		return "", false, fmt.Errorf("couldn't find key %s in Secret %s/%s", ref.Key, pod.Namespace, ref.Name)
	}
	return "", false, fmt.Errorf("the local pod runner supports valueFrom fieldRef, configMapKeyRef and secretKeyRef only")
}

// FieldValue returns the value of a downward API field path of pod: metadata.name,
// metadata.namespace, metadata.uid, metadata.labels['k'], metadata.annotations['k'],
// spec.nodeName, spec.serviceAccountName, status.podIP, status.podIPs, status.hostIP
// or status.hostIPs.
func FieldValue(pod Pod, path string) (string, error) {
	if key, ok := subscript(path, "metadata.labels"); ok {
		return pod.Labels[key], nil
	}
	if key, ok := subscript(path, "metadata.annotations"); ok {
		return pod.Annotations[key], nil
	}
	switch path {
	case "metadata.name":
		return pod.Name, nil
	case "metadata.namespace":
		return pod.Namespace, nil
	case "metadata.uid":
		return string(pod.UID), nil
	case "spec.nodeName":
		return pod.Spec.NodeName, nil
	case "spec.serviceAccountName":
		return pod.Spec.ServiceAccountName, nil
	case "status.podIP", "status.podIPs":
		return pod.PodIP, nil
	case "status.hostIP", "status.hostIPs":
		return pod.HostIP, nil
	}
	return "", fmt.Errorf("field path %q is not supported by the local pod runner", path)
}

// subscript returns k from "<field>['k']".
func subscript(path, field string) (string, bool) {
	rest, ok := strings.CutPrefix(path, field+"['")
	if !ok {
		return "", false
	}
	return strings.CutSuffix(rest, "']")
}

// Expand replaces each $(NAME) in s by NAME's value where lookup knows it, and $$ by
// $, as Kubernetes does for env values, command and args: $(UNKNOWN) stays as written
// and $$(NAME) gives the literal $(NAME).
func Expand(s string, lookup func(string) (string, bool)) string {
	if !strings.Contains(s, "$") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch next := s[i+1]; {
		case next == '$':
			b.WriteByte('$')
			i++
		case next == '(':
			end := strings.IndexByte(s[i+2:], ')')
			if end < 0 {
				b.WriteString(s[i:])
				return b.String()
			}
			name := s[i+2 : i+2+end]
			if v, ok := lookup(name); ok {
				b.WriteString(v)
			} else {
				b.WriteString(s[i : i+3+end])
			}
			i += 2 + end
		default:
			b.WriteByte('$')
		}
	}
	return b.String()
}

func isOptional(optional *bool) bool { return optional != nil && *optional }
