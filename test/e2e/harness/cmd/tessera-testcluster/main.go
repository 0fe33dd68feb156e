// Command tessera-testcluster is the multi-call binary of tessera's end-to-end
// test harness. It links upstream Kubernetes code (etcd, kube-apiserver,
// kube-scheduler, kubectl) so that the tests run against the real control
// plane rather than a fake.
//
// Dispatch is on the first argument ("tessera-testcluster up ...") or, when the
// binary is invoked through a symlink, on the basename of argv[0]
// ("kubectl get pods").
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

type subcommand struct {
	summary string
	run     func(args []string) int
}

var subcommands = map[string]subcommand{
	"up":                      {"start etcd + kube-apiserver + kube-scheduler in this process and write a kubeconfig", runUp},
	"etcd":                    {"run an embedded etcd server", runEtcd},
	"kube-apiserver":          {"run the upstream kube-apiserver (upstream flags)", runKubeAPIServer},
	"kube-scheduler":          {"run the upstream kube-scheduler (upstream flags)", runKubeScheduler},
	"kubectl":                 {"run the upstream kubectl", runKubectl},
	"kube-controller-manager": {"run the upstream kube-controller-manager (upstream flags)", runKubeControllerManager},
	"kube-proxy":              {"run the upstream kube-proxy (upstream flags; a real node's Service routing)", runKubeProxy},
	"oci-image":               {"write an OCI image archive of a folder's files (ctr images import loads it)", runOCIImage},
	"real-kubelet":            {"run the whole upstream kubelet (upstream flags; needs a CRI runtime)", runRealKubelet},
	"simnodes":                {"register simulated GPU nodes and act as their kubelet", runSimnodes},
	"kubelet":                 {"run the upstream kubelet device manager + PodResources server for one node", runKubelet},
	"version":                 {"print the pinned upstream versions", runVersion},
}

const self = "tessera-testcluster"

func usage() {
	fmt.Fprintf(os.Stderr, "usage: %s <subcommand> [flags]\n\nsubcommands:\n", self)
	names := make([]string, 0, len(subcommands))
	for n := range subcommands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(os.Stderr, "  %-16s %s\n", n, subcommands[n].summary)
	}
}

func main() {
	name := filepath.Base(os.Args[0])
	args := os.Args[1:]
	if _, ok := subcommands[name]; !ok {
		if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			usage()
			if len(args) == 0 {
				os.Exit(2)
			}
			os.Exit(0)
		}
		name, args = args[0], args[1:]
	}
	sc, ok := subcommands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "%s: unknown subcommand %q\n", self, name)
		usage()
		os.Exit(2)
	}
	// Upstream commands (cobra) read os.Args[1:]; make them see their own name.
	os.Args = append([]string{name}, args...)
	os.Exit(sc.run(args))
}

func runVersion(_ []string) int {
	for _, m := range []string{"k8s.io/kubernetes", "go.etcd.io/etcd/server/v3", "k8s.io/kubectl", "k8s.io/client-go"} {
		fmt.Printf("%s %s\n", m, moduleVersion(m))
	}
	fmt.Printf("go %s\n", goVersion())
	return 0
}

func fatalf(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, self+": "+strings.TrimSuffix(format, "\n")+"\n", a...)
	return 1
}
