package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/component-base/cli"
	"k8s.io/component-base/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func versionString() string {
	return version.Get().String()
}

// freePort asks the kernel for a currently free loopback TCP port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// runAPIServer strips the --embedded-etcd-* flags from os.Args, starts an
// embedded etcd member on loopback, then runs kube-apiserver against it.
func runAPIServer() int {
	etcdDir := ""
	clientPort, peerPort := 0, 0
	var rest []string
	for _, a := range os.Args[1:] {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "--embedded-etcd-dir":
			etcdDir = v
		case "--embedded-etcd-client-port":
			clientPort, _ = strconv.Atoi(v)
		case "--embedded-etcd-peer-port":
			peerPort, _ = strconv.Atoi(v)
		default:
			rest = append(rest, a)
		}
	}
	if etcdDir == "" {
		fmt.Fprintln(os.Stderr, "apiserver: --embedded-etcd-dir=DIR is required")
		return 2
	}
	var err error
	if clientPort == 0 {
		if clientPort, err = freePort(); err != nil {
			fmt.Fprintln(os.Stderr, "apiserver: no free port for etcd:", err)
			return 1
		}
	}
	if peerPort == 0 {
		if peerPort, err = freePort(); err != nil {
			fmt.Fprintln(os.Stderr, "apiserver: no free port for etcd:", err)
			return 1
		}
	}

	cfg := embed.NewConfig()
	cfg.Name = "lockstep"
	cfg.Dir = etcdDir
	cu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	pu := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	cfg.ListenClientUrls = []url.URL{cu}
	cfg.AdvertiseClientUrls = []url.URL{cu}
	cfg.ListenPeerUrls = []url.URL{pu}
	cfg.AdvertisePeerUrls = []url.URL{pu}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "warn"
	cfg.LogOutputs = []string{"stderr"}
	// A throw-away test cluster: durability across power loss is irrelevant,
	// fsync latency on a busy 2-core machine is not.
	cfg.UnsafeNoFsync = true
	cfg.QuotaBackendBytes = 2 << 30

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "apiserver: starting embedded etcd:", err)
		return 1
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		fmt.Fprintln(os.Stderr, "apiserver: embedded etcd failed:", err)
		return 1
	case <-time.After(60 * time.Second):
		e.Close()
		fmt.Fprintln(os.Stderr, "apiserver: embedded etcd not ready after 60s")
		return 1
	}
	fmt.Fprintf(os.Stderr, "embedded etcd ready at %s (data %s)\n", cu.String(), etcdDir)
	var closing atomic.Bool
	go func() {
		if err, ok := <-e.Err(); ok && err != nil && !closing.Load() {
			fmt.Fprintln(os.Stderr, "embedded etcd error:", err)
			os.Exit(1)
		}
	}()

	os.Args = append([]string{os.Args[0], "--etcd-servers=" + cu.String()}, rest...)
	code := cli.Run(apiserver.NewAPIServerCommand())

	// The apiserver returns after SIGTERM/SIGINT handling; shut etcd down cleanly.
	signal.Ignore(syscall.SIGTERM, syscall.SIGINT)
	closing.Store(true)
	e.Close()
	return code
}
