package main

import (
	"context"
	"os"
	"runtime"
	"runtime/debug"

	"k8s.io/component-base/cli"
	kubectlcmd "k8s.io/kubectl/pkg/cmd"
	kubectlutil "k8s.io/kubectl/pkg/cmd/util"
	apiserverapp "k8s.io/kubernetes/cmd/kube-apiserver/app"
	controllermanagerapp "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	proxyapp "k8s.io/kubernetes/cmd/kube-proxy/app"
	schedulerapp "k8s.io/kubernetes/cmd/kube-scheduler/app"
	kubeletapp "k8s.io/kubernetes/cmd/kubelet/app"
)

// The wrappers below are the upstream main() functions, verbatim in
// spirit: same cobra command, same flags, same exit codes.

func runKubeAPIServer(_ []string) int {
	return cli.Run(apiserverapp.NewAPIServerCommand())
}

func runKubeScheduler(_ []string) int {
	return cli.Run(schedulerapp.NewSchedulerCommand())
}

func runKubeControllerManager(_ []string) int {
	return cli.Run(controllermanagerapp.NewControllerManagerCommand())
}

// runKubeProxy is the upstream kube-proxy: a real node's Service routing (ClusterIPs to
// endpoints, for pods and for the host's own processes, the API server's webhook calls included).
func runKubeProxy(_ []string) int {
	return cli.Run(proxyapp.NewProxyCommand())
}

// runRealKubelet is the whole upstream kubelet (a real node: it needs a CRI runtime), as opposed
// to runKubelet, which runs only its device manager and PodResources server in-process.
func runRealKubelet(_ []string) int {
	return cli.Run(kubeletapp.NewKubeletCommand(context.Background()))
}

func runKubectl(_ []string) int {
	command := kubectlcmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		kubectlutil.CheckErr(err) // prints and exits like upstream kubectl
	}
	return 0
}

func moduleVersion(path string) string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, d := range bi.Deps {
		if d.Path == path {
			if d.Replace != nil {
				return d.Replace.Version
			}
			return d.Version
		}
	}
	return "not linked"
}

func goVersion() string { return runtime.Version() }

var _ = os.Args
