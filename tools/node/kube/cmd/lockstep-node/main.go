// Command lockstep-node is a multi-call binary with the node agents of the
// local cluster's real node, built from the upstream Go modules:
//
//	lockstep-node kubelet [kubelet flags...]
//	lockstep-node kube-proxy [kube-proxy flags...]
//
// The component may also be chosen by the name the binary is invoked as.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"

	proxy "k8s.io/kubernetes/cmd/kube-proxy/app"
	kubelet "k8s.io/kubernetes/cmd/kubelet/app"
)

func usage() {
	fmt.Fprintf(os.Stderr, "usage: %s {kubelet|kube-proxy} [args...]\n", filepath.Base(os.Args[0]))
	os.Exit(2)
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	switch name {
	case "kubelet", "kube-proxy":
	default:
		if len(args) == 0 {
			usage()
		}
		name, args = args[0], args[1:]
	}
	os.Args = append([]string{name}, args...)
	switch name {
	case "kubelet":
		os.Exit(cli.Run(kubelet.NewKubeletCommand(context.Background())))
	case "kube-proxy", "proxy":
		os.Exit(cli.Run(proxy.NewProxyCommand()))
	default:
		usage()
	}
}
