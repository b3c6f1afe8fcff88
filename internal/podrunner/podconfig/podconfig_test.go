package podconfig

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/utils/ptr"
)

// objects is an in-memory Objects.
type objects struct {
	secrets    map[string]*corev1.Secret
	configMaps map[string]*corev1.ConfigMap
}

func (o objects) Secret(_ context.Context, ns, name string) (*corev1.Secret, error) {
	if s, ok := o.secrets[ns+"/"+name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

func (o objects) ConfigMap(_ context.Context, ns, name string) (*corev1.ConfigMap, error) {
	if cm, ok := o.configMaps[ns+"/"+name]; ok {
		return cm, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "configmaps"}, name)
}

var testObjects = objects{
	secrets: map[string]*corev1.Secret{"ns/tls": {Data: map[string][]byte{
		"tls.crt": []byte("CERT"), "tls.key": []byte("KEY"), "bad-name": []byte("x")}}},
	configMaps: map[string]*corev1.ConfigMap{"ns/settings": {
		Data:       map[string]string{"MODE": "fast", "LEVEL": "3"},
		BinaryData: map[string][]byte{"blob": {0, 1}}}},
}

func testPod() Pod {
	return Pod{
		Pod: &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web-0", UID: "uid-1",
				Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"team": "infra"}},
			Spec: corev1.PodSpec{NodeName: "local", ServiceAccountName: "sa"},
		},
		PodIP: "127.0.2.9", HostIP: "127.0.0.1",
	}
}

func fieldRef(path string) *corev1.EnvVarSource {
	return &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}
}

func TestEnv(t *testing.T) {
	c := &corev1.Container{
		EnvFrom: []corev1.EnvFromSource{
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}},
			{Prefix: "TLS_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "tls"}}},
			{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Optional: ptr.To(true)}},
		},
		Env: []corev1.EnvVar{
			{Name: "POD_NAME", ValueFrom: fieldRef("metadata.name")},
			{Name: "NAMESPACE", ValueFrom: fieldRef("metadata.namespace")},
			{Name: "UID", ValueFrom: fieldRef("metadata.uid")},
			{Name: "APP", ValueFrom: fieldRef("metadata.labels['app']")},
			{Name: "TEAM", ValueFrom: fieldRef("metadata.annotations['team']")},
			{Name: "NODE", ValueFrom: fieldRef("spec.nodeName")},
			{Name: "SA", ValueFrom: fieldRef("spec.serviceAccountName")},
			{Name: "POD_IP", ValueFrom: fieldRef("status.podIP")},
			{Name: "HOST_IP", ValueFrom: fieldRef("status.hostIP")},
			{Name: "MODE", Value: "slow"}, // overrides envFrom, keeps its place
			{Name: "KEY", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "tls"}, Key: "tls.key"}}},
			{Name: "LVL", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "LEVEL"}}},
			{Name: "NONE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "nope", Optional: ptr.To(true)}}},
			{Name: "URL", Value: "http://$(POD_IP):$(PORT)/$(MODE)"},
		},
	}
	env, err := Env(context.Background(), testObjects, testPod(), c)
	if err != nil {
		t.Fatal(err)
	}
	got := env.List()
	wantList := []string{
		"LEVEL=3", "MODE=slow", "TLS_bad-name=x", "TLS_tls.crt=CERT", "TLS_tls.key=KEY",
		"POD_NAME=web-0", "NAMESPACE=ns", "UID=uid-1", "APP=web", "TEAM=infra", "NODE=local", "SA=sa",
		"POD_IP=127.0.2.9", "HOST_IP=127.0.0.1", "KEY=KEY", "LVL=3",
		"URL=http://127.0.2.9:$(PORT)/slow",
	}
	if !reflect.DeepEqual(got, wantList) {
		t.Errorf("Env =\n%q\nwant\n%q", got, wantList)
	}
	if _, ok := env.Lookup("NONE"); ok {
		t.Error("a missing optional key was set")
	}
}

func TestEnvFromSkipsInvalidNames(t *testing.T) {
	objs := objects{configMaps: map[string]*corev1.ConfigMap{"ns/odd": {Data: map[string]string{
		"1st": "a", "has space": "b", "ok.name": "c", "OK": "d"}}}}
	c := &corev1.Container{EnvFrom: []corev1.EnvFromSource{
		{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "odd"}}},
		{Prefix: "P_", ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "odd"}}},
	}}
	env, err := Env(context.Background(), objs, testPod(), c)
	if err != nil {
		t.Fatal(err)
	}
	// "1st" and "has space" are no variable names; with the prefix, "P_1st" is.
	want := []string{"OK=d", "ok.name=c", "P_1st=a", "P_OK=d", "P_ok.name=c"}
	if got := env.List(); !reflect.DeepEqual(got, want) {
		t.Errorf("Env = %q, want %q", got, want)
	}
}

func TestEnvFromMissingSourceFails(t *testing.T) {
	c := &corev1.Container{EnvFrom: []corev1.EnvFromSource{
		{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}}},
	}}
	if env, err := Env(context.Background(), testObjects, testPod(), c); err == nil || !strings.Contains(err.Error(), "ns/absent") {
		t.Errorf("Env = %v, %v; want an error naming Secret ns/absent", env, err)
	}
}

func TestEnvErrors(t *testing.T) {
	for name, v := range map[string]corev1.EnvVar{
		"missing secret": {Name: "X", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "absent"}, Key: "k"}}},
		"missing key": {Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Key: "nope"}}},
		"unsupported field": {Name: "X", ValueFrom: fieldRef("metadata.generation")},
		"resource field":    {Name: "X", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.cpu"}}},
	} {
		if env, err := Env(context.Background(), testObjects, testPod(), &corev1.Container{Env: []corev1.EnvVar{v}}); err == nil {
			t.Errorf("%s: Env = %q, want an error", name, env.List())
		} else if !strings.Contains(err.Error(), "env X") {
			t.Errorf("%s: error %q does not name the variable", name, err)
		}
	}
}

func TestExpand(t *testing.T) {
	vars := map[string]string{"A": "1", "B": "two"}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	for in, want := range map[string]string{
		"plain":          "plain",
		"$(A)":           "1",
		"x$(A)y$(B)z":    "x1ytwoz",
		"$(C)":           "$(C)",
		"$$(A)":          "$(A)",
		"$$":             "$",
		"cost $5":        "cost $5",
		"$":              "$",
		"$(A":            "$(A",
		"$(A)$(":         "1$(",
		"a$$$(A)":        "a$1",
		"--listen=$(B)$": "--listen=two$",
	} {
		if got := Expand(in, lookup); got != want {
			t.Errorf("Expand(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestWriteVolumes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "volumes")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"},
		Spec: corev1.PodSpec{Volumes: []corev1.Volume{
			{Name: "certs", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{
				SecretName: "tls", Items: []corev1.KeyToPath{{Key: "tls.crt", Path: "crt"}, {Key: "tls.key", Path: "sub/key", Mode: ptr.To[int32](0o600)}}}}},
			{Name: "all", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
				LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}}}},
			{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "maybe", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "absent", Optional: ptr.To(true)}}},
			{Name: "proj", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Items: []corev1.KeyToPath{{Key: "MODE", Path: "mode"}}}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "tls"}, Items: []corev1.KeyToPath{{Key: "tls.crt", Path: "crt"}}}},
			}}}},
			{Name: "host", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}},
		}},
	}
	// A file left by an earlier run disappears.
	if err := os.MkdirAll(filepath.Join(dir, "scratch"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "scratch", "old"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	vols, err := WriteVolumes(context.Background(), testObjects, pod, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"certs", "all", "scratch", "maybe", "proj", "host"} {
		if vols[name] != filepath.Join(dir, name) {
			t.Errorf("volume %s at %q, want %q", name, vols[name], filepath.Join(dir, name))
		}
	}
	files := map[string]string{
		"certs/crt": "CERT", "certs/sub/key": "KEY",
		"all/MODE": "fast", "all/LEVEL": "3", "all/blob": "\x00\x01",
		"proj/mode": "fast", "proj/crt": "CERT",
	}
	for rel, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, rel))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", rel, got, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(dir, "certs/sub/key")); err != nil || fi.Mode().Perm()&0o077 != 0 {
		t.Errorf("certs/sub/key mode = %v, %v; want no group or other access", fi.Mode(), err)
	}
	for _, empty := range []string{"scratch", "maybe", "host"} {
		if entries, err := os.ReadDir(filepath.Join(dir, empty)); err != nil || len(entries) != 0 {
			t.Errorf("%s holds %v (%v), want an empty directory", empty, entries, err)
		}
	}
}

func TestWriteVolumesErrors(t *testing.T) {
	for name, v := range map[string]corev1.VolumeSource{
		"missing secret": {Secret: &corev1.SecretVolumeSource{SecretName: "absent"}},
		"missing key":    {ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}, Items: []corev1.KeyToPath{{Key: "nope", Path: "x"}}}},
		"escaping item":  {Secret: &corev1.SecretVolumeSource{SecretName: "tls", Items: []corev1.KeyToPath{{Key: "tls.crt", Path: "../crt"}}}},
		"absolute item":  {Secret: &corev1.SecretVolumeSource{SecretName: "tls", Items: []corev1.KeyToPath{{Key: "tls.crt", Path: "/crt"}}}},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}, Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v", VolumeSource: v}}}}
		if _, err := WriteVolumes(context.Background(), testObjects, pod, t.TempDir()); err == nil || !strings.Contains(err.Error(), "volume v") {
			t.Errorf("%s: WriteVolumes error = %v, want one naming volume v", name, err)
		}
	}
}

func TestMountsAndRewrite(t *testing.T) {
	vols := Volumes{"tls": "/state/p/volumes/tls", "data": "/state/p/volumes/data"}
	c := &corev1.Container{VolumeMounts: []corev1.VolumeMount{
		{Name: "tls", MountPath: "/etc/secret-volume/"},
		{Name: "data", MountPath: "/var/data"},
		{Name: "data", MountPath: "/var/data/models", SubPath: "m"},
	}}
	mounts, err := vols.Mounts(c)
	if err != nil {
		t.Fatal(err)
	}
	for in, want := range map[string]string{
		"/etc/secret-volume/crt":     "/state/p/volumes/tls/crt",
		"/etc/secret-volume":         "/state/p/volumes/tls",
		"/etc/secret-volume/a/../b":  "/state/p/volumes/tls/b",
		"/var/data/x":                "/state/p/volumes/data/x",
		"/var/data/models/llama":     "/state/p/volumes/data/m/llama",
		"/etc/secret-volumes/crt":    "/etc/secret-volumes/crt",
		"/etc/other":                 "/etc/other",
		"relative/etc/secret-volume": "relative/etc/secret-volume",
		"--cert=/etc/secret-volume":  "--cert=/etc/secret-volume",
		"":                           "",
	} {
		if got := Rewrite(in, mounts); got != want {
			t.Errorf("Rewrite(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Rewrite("/anything", []Mount{{MountPath: "/", Path: "/root-vol"}}); got != "/root-vol/anything" {
		t.Errorf("Rewrite under a mount at / = %q, want /root-vol/anything", got)
	}
}

func TestMountsErrors(t *testing.T) {
	vols := Volumes{"v": "/d"}
	for name, m := range map[string]corev1.VolumeMount{
		"unknown volume":   {Name: "nope", MountPath: "/x"},
		"escaping subPath": {Name: "v", MountPath: "/x", SubPath: "../y"},
	} {
		if got, err := vols.Mounts(&corev1.Container{VolumeMounts: []corev1.VolumeMount{m}}); err == nil {
			t.Errorf("%s: Mounts = %v, want an error", name, got)
		}
	}
}

func TestEnvironmentKeepsFirstPlaceAndLastValue(t *testing.T) {
	var env Environment
	env.Set("B", "1")
	env.Set("A", "2")
	env.Set("B", "3")
	if got, want := env.List(), []string{"B=3", "A=2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("List = %q, want %q", got, want)
	}
	if got := env.Names(); !reflect.DeepEqual(got, []string{"B", "A"}) {
		t.Errorf("Names = %q, want [B A]", got)
	}
	if v, ok := env.Lookup("C"); ok || v != "" || env.Get("C") != "" {
		t.Errorf("Lookup of an unset variable = %q, %v", v, ok)
	}
}
