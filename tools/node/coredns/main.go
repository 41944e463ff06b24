// Command coredns is a minimal CoreDNS for the real node of the local cluster:
// only the plugins needed to serve cluster.local from the Kubernetes API
// (bind, ready, health, errors, log, cache, kubernetes).
package main

import (
	"fmt"
	"os"

	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	// Execution order, as in CoreDNS's plugin.cfg.
	if err := dnsserver.SetDirectives([]string{"bind", "ready", "health", "errors", "log", "cache", "kubernetes"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	coremain.Run()
}
