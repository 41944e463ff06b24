// Command lockstep-local-provisioner provisions node-local PersistentVolumes for the
// StorageClass "local" of the Lockstep test cluster.
//
//	lockstep-local-provisioner --kubeconfig FILE --root DIR [--name lockstep.dev/local]
//
// The in-tree hostpath provisioner of kube-controller-manager creates each volume as a
// root-owned directory with mode 0750 and a hostPath PersistentVolume, and the kubelet
// applies no fsGroup to hostPath: a container that runs as a non-root user (PostgreSQL,
// uid 999) cannot write to it. This provisioner creates the same kind of directory,
// but hands it out as a `local` PersistentVolume pinned to the node the scheduler
// chose (volumeBindingMode WaitForFirstConsumer). The kubelet applies a pod's fsGroup
// to local volumes, as it does on any production cluster with local storage, so the
// pod's own securityContext is all a non-root server needs.
//
// Provisioning itself (watching claims, naming volumes, binding, retries, Events and
// reclaiming) is sig-storage-lib-external-provisioner's, the library external
// provisioners are built on; this file only says where a volume lives.
//
// Every node shares this machine's file system (the real node runs here, and KWOK
// nodes run nothing), so a directory made here is the volume on any node.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"
	"sigs.k8s.io/sig-storage-lib-external-provisioner/v13/controller"
)

// hostnameLabel pins a volume to the node that holds it.
const hostnameLabel = "kubernetes.io/hostname"

type localProvisioner struct {
	root string
}

var _ controller.Provisioner = &localProvisioner{}

// Provision makes the directory root/<pv name> and a local PersistentVolume for it on
// the node the scheduler selected for the claim's first pod.
func (p *localProvisioner) Provision(_ context.Context, o controller.ProvisionOptions) (*v1.PersistentVolume, controller.ProvisioningState, error) {
	if o.SelectedNodeName == "" {
		return nil, controller.ProvisioningFinished, fmt.Errorf(
			"storage class %s: a local volume needs a node; set volumeBindingMode: WaitForFirstConsumer", o.StorageClass.Name)
	}
	path := filepath.Join(p.root, o.PVName)
	// 0755 root: the kubelet makes it the pod's fsGroup's (group rwx, setgid) at mount.
	if err := os.MkdirAll(path, 0o755); err != nil {
		return nil, controller.ProvisioningInBackground, fmt.Errorf("make %s: %w", path, err)
	}
	reclaim := v1.PersistentVolumeReclaimDelete
	if o.StorageClass.ReclaimPolicy != nil {
		reclaim = *o.StorageClass.ReclaimPolicy
	}
	pv := &v1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: o.PVName},
		Spec: v1.PersistentVolumeSpec{
			PersistentVolumeReclaimPolicy: reclaim,
			AccessModes:                   o.PVC.Spec.AccessModes,
			Capacity:                      v1.ResourceList{v1.ResourceStorage: o.PVC.Spec.Resources.Requests[v1.ResourceStorage]},
			StorageClassName:              o.StorageClass.Name,
			VolumeMode:                    o.PVC.Spec.VolumeMode,
			PersistentVolumeSource: v1.PersistentVolumeSource{
				Local: &v1.LocalVolumeSource{Path: path},
			},
			NodeAffinity: &v1.VolumeNodeAffinity{Required: &v1.NodeSelector{
				NodeSelectorTerms: []v1.NodeSelectorTerm{{
					MatchExpressions: []v1.NodeSelectorRequirement{{
						Key:      hostnameLabel,
						Operator: v1.NodeSelectorOpIn,
						Values:   []string{o.SelectedNodeName},
					}},
				}},
			}},
		},
	}
	return pv, controller.ProvisioningFinished, nil
}

// Delete removes the directory of a volume this provisioner made, and nothing else.
func (p *localProvisioner) Delete(_ context.Context, pv *v1.PersistentVolume) error {
	if pv.Spec.Local == nil {
		return &controller.IgnoredError{Reason: "not a local volume"}
	}
	path := filepath.Clean(pv.Spec.Local.Path)
	if filepath.Dir(path) != filepath.Clean(p.root) || !strings.HasPrefix(filepath.Base(path), "pvc-") {
		return &controller.IgnoredError{Reason: fmt.Sprintf("%s is not under %s", path, p.root)}
	}
	if err := os.RemoveAll(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

func main() {
	kubeconfig := flag.String("kubeconfig", "", "kubeconfig of the control plane")
	root := flag.String("root", "", "directory under which volumes are made")
	name := flag.String("name", "lockstep.dev/local", "provisioner name, as StorageClasses name it")
	klog.InitFlags(nil)
	flag.Parse()
	if *kubeconfig == "" || *root == "" {
		fmt.Fprintln(os.Stderr, "usage: lockstep-local-provisioner --kubeconfig FILE --root DIR [--name NAME]")
		os.Exit(2)
	}
	if err := os.MkdirAll(*root, 0o755); err != nil {
		klog.Fatalf("make %s: %v", *root, err)
	}
	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		klog.Fatalf("kubeconfig %s: %v", *kubeconfig, err)
	}
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		klog.Fatalf("client: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	controller.NewProvisionController(ctx, client, *name, &localProvisioner{root: *root},
		controller.LeaderElection(false),
	).Run(ctx)
}
