package podconfig

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/log"
)

// defaultFileMode is the mode of the files of Secret and ConfigMap volumes that set
// none, as in Kubernetes.
const defaultFileMode = 0o644

// Volumes maps the names of a pod's volumes to the directories that stand in for them.
type Volumes map[string]string

// WriteVolumes writes the volumes of pod as directories under dir, one per volume
// named after it, replacing whatever an earlier call wrote there, and returns them:
// secret and configMap volumes (with their items and modes) and projected volumes'
// secret and configMap sources get their files; emptyDir and every other kind of
// volume get an empty directory, which is logged for kinds other than emptyDir. The
// files are written once: later changes to the Secrets and ConfigMaps are not seen.
// Like kubelet's FailedMount, it fails when a Secret or ConfigMap that is not optional
// is missing, or an item names a missing key.
func WriteVolumes(ctx context.Context, objs Objects, pod *corev1.Pod, dir string) (Volumes, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	vols := Volumes{}
	for _, v := range pod.Spec.Volumes {
		path := filepath.Join(dir, v.Name)
		if err := os.MkdirAll(path, 0o755); err != nil {
			return nil, err
		}
		if err := writeVolume(ctx, objs, pod.Namespace, v, path); err != nil {
			return nil, fmt.Errorf("volume %s: %w", v.Name, err)
		}
		vols[v.Name] = path
	}
	return vols, nil
}

// writeVolume writes the files of volume v into dir.
func writeVolume(ctx context.Context, objs Objects, ns string, v corev1.Volume, dir string) error {
	switch {
	case v.EmptyDir != nil:
		return nil
	case v.Secret != nil:
		return writeSecret(ctx, objs, ns, v.Secret.SecretName, v.Secret.Optional, v.Secret.Items, v.Secret.DefaultMode, dir)
	case v.ConfigMap != nil:
		return writeConfigMap(ctx, objs, ns, v.ConfigMap.Name, v.ConfigMap.Optional, v.ConfigMap.Items, v.ConfigMap.DefaultMode, dir)
	case v.Projected != nil:
		for _, src := range v.Projected.Sources {
			var err error
			switch {
			case src.Secret != nil:
				err = writeSecret(ctx, objs, ns, src.Secret.Name, src.Secret.Optional, src.Secret.Items, v.Projected.DefaultMode, dir)
			case src.ConfigMap != nil:
				err = writeConfigMap(ctx, objs, ns, src.ConfigMap.Name, src.ConfigMap.Optional, src.ConfigMap.Items, v.Projected.DefaultMode, dir)
			default:
				log.FromContext(ctx).Info("projected volume source not supported by the local pod runner; left out", "volume", v.Name)
			}
			if err != nil {
				return err
			}
		}
		return nil
	}
	log.FromContext(ctx).Info("volume type not supported by the local pod runner; it is an empty directory", "volume", v.Name)
	return nil
}

func writeSecret(ctx context.Context, objs Objects, ns, name string, optional *bool, items []corev1.KeyToPath, mode *int32, dir string) error {
	s, err := secret(ctx, objs, ns, name, optional)
	if err != nil || s == nil {
		return err
	}
	return writeKeys(s.Data, "Secret "+ns+"/"+name, optional, items, mode, dir)
}

func writeConfigMap(ctx context.Context, objs Objects, ns, name string, optional *bool, items []corev1.KeyToPath, mode *int32, dir string) error {
	cm, err := configMap(ctx, objs, ns, name, optional)
	if err != nil || cm == nil {
		return err
	}
	data := make(map[string][]byte, len(cm.Data)+len(cm.BinaryData))
	for k, v := range cm.Data {
		data[k] = []byte(v)
	}
	for k, v := range cm.BinaryData {
		data[k] = v
	}
	return writeKeys(data, "ConfigMap "+ns+"/"+name, optional, items, mode, dir)
}

// writeKeys writes data into dir: every key as a file named after it, or only items,
// each at its path.
func writeKeys(data map[string][]byte, source string, optional *bool, items []corev1.KeyToPath, mode *int32, dir string) error {
	if len(items) == 0 {
		for _, k := range sortedKeys(data) {
			items = append(items, corev1.KeyToPath{Key: k, Path: k})
		}
	}
	for _, item := range items {
		value, ok := data[item.Key]
		if !ok {
			if isOptional(optional) {
				continue
			}
			return fmt.Errorf("couldn't find key %s in %s", item.Key, source)
		}
		rel, err := relativePath(item.Path)
		if err != nil {
			return fmt.Errorf("item %s: %w", item.Key, err)
		}
		perm := os.FileMode(defaultFileMode)
		if item.Mode != nil {
			perm = os.FileMode(*item.Mode) & os.ModePerm
		} else if mode != nil {
			perm = os.FileMode(*mode) & os.ModePerm
		}
		path := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, value, perm|0o200); err != nil { // the runner must be able to rewrite it
			return err
		}
	}
	return nil
}

// relativePath checks that p is a relative path that stays below its directory.
func relativePath(p string) (string, error) {
	clean := filepath.Clean(p)
	if p == "" || filepath.IsAbs(p) || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("path %q must be relative and must not contain '..'", p)
	}
	return clean, nil
}

// Mount is a container's volume mount resolved to the local directory that stands in
// for it.
type Mount struct {
	// MountPath is where the container expects the volume.
	MountPath string
	// Path is the local directory (the volume's, or its subPath) that stands in for it.
	Path string
}

// Mounts returns c's volume mounts resolved to their local directories; it fails when
// a mount names a volume the pod lacks or a subPath that leaves its volume.
func (v Volumes) Mounts(c *corev1.Container) ([]Mount, error) {
	mounts := make([]Mount, 0, len(c.VolumeMounts))
	for _, m := range c.VolumeMounts {
		dir, ok := v[m.Name]
		if !ok {
			return nil, fmt.Errorf("volume mount %s: the pod has no volume %q", m.MountPath, m.Name)
		}
		if m.SubPath != "" {
			rel, err := relativePath(m.SubPath)
			if err != nil {
				return nil, fmt.Errorf("volume mount %s: subPath: %w", m.MountPath, err)
			}
			dir = filepath.Join(dir, rel)
		}
		mounts = append(mounts, Mount{MountPath: filepath.Clean(m.MountPath), Path: dir})
	}
	return mounts, nil
}

// Rewrite returns value with its mount path replaced by the mount's local directory
// when value as a whole is an absolute path at or under one of mounts' mount paths
// (the innermost mount wins); any other value is returned unchanged. Paths inside
// longer values, such as "--cert=/etc/tls/crt", are not rewritten.
func Rewrite(value string, mounts []Mount) string {
	if !strings.HasPrefix(value, "/") {
		return value
	}
	clean := filepath.Clean(value)
	best := -1
	for i, m := range mounts {
		if (clean == m.MountPath || strings.HasPrefix(clean, m.MountPath+"/") || m.MountPath == "/") &&
			(best < 0 || len(m.MountPath) > len(mounts[best].MountPath)) {
			best = i
		}
	}
	if best < 0 {
		return value
	}
	rel, err := filepath.Rel(mounts[best].MountPath, clean)
	if err != nil {
		return value
	}
	return filepath.Join(mounts[best].Path, rel)
}

// secret returns the named Secret, or nil if it is missing and optional.
func secret(ctx context.Context, objs Objects, ns, name string, optional *bool) (*corev1.Secret, error) {
	s, err := objs.Secret(ctx, ns, name)
	if apierrors.IsNotFound(err) && isOptional(optional) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get Secret %s/%s: %w", ns, name, err)
	}
	return s, nil
}

// configMap returns the named ConfigMap, or nil if it is missing and optional.
func configMap(ctx context.Context, objs Objects, ns, name string, optional *bool) (*corev1.ConfigMap, error) {
	cm, err := objs.ConfigMap(ctx, ns, name)
	if apierrors.IsNotFound(err) && isOptional(optional) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get ConfigMap %s/%s: %w", ns, name, err)
	}
	return cm, nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
