package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"
	scheduleroptions "k8s.io/kubernetes/cmd/kube-scheduler/app/options"
	schedulervalidation "k8s.io/kubernetes/pkg/scheduler/apis/config/validation"
	"sigs.k8s.io/yaml"
)

// The scheduler's client rate limits in the harness. Upstream's defaults
// (50 QPS, burst 100) throttle the binding of a few hundred pods for seconds.
const (
	schedulerQPS   = 500
	schedulerBurst = 1000
)

const schedulerConfigAPIVersion = "kubescheduler.config.k8s.io/v1"

// prepareSchedulerConfig reads the test's KubeSchedulerConfiguration from src,
// fills in what only up knows (the cluster's kubeconfig) and what up needs
// (no leader election; see up.go), unless the file sets them, and writes the
// result to dst. It then loads dst the way kube-scheduler will, so that a bad
// file is reported before anything starts. Every error names src.
func prepareSchedulerConfig(src, dst, kubeconfig string) error {
	fail := func(format string, a ...any) error {
		return fmt.Errorf("--scheduler-config %s: %s", src, fmt.Sprintf(format, a...))
	}
	data, err := os.ReadFile(src)
	if err != nil {
		return fail("%v", err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		return fail("not valid YAML: %v", err)
	}
	if cfg == nil {
		return fail("empty file")
	}
	if v, _ := cfg["apiVersion"].(string); v != schedulerConfigAPIVersion {
		return fail("apiVersion is %q, want %q", v, schedulerConfigAPIVersion)
	}
	if k, _ := cfg["kind"].(string); k != "KubeSchedulerConfiguration" {
		return fail("kind is %q, want KubeSchedulerConfiguration", k)
	}
	section := func(name string) (map[string]any, error) {
		switch s := cfg[name].(type) {
		case nil:
			m := map[string]any{}
			cfg[name] = m
			return m, nil
		case map[string]any:
			return s, nil
		default:
			return nil, fail("%s must be a mapping, got %T", name, s)
		}
	}
	cc, err := section("clientConnection")
	if err != nil {
		return err
	}
	if v, _ := cc["kubeconfig"].(string); v == "" {
		cc["kubeconfig"] = kubeconfig
	}
	if _, ok := cc["qps"]; !ok {
		cc["qps"] = schedulerQPS
	}
	if _, ok := cc["burst"]; !ok {
		cc["burst"] = schedulerBurst
	}
	le, err := section("leaderElection")
	if err != nil {
		return err
	}
	if _, ok := le["leaderElect"]; !ok {
		le["leaderElect"] = false
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return fail("%v", err)
	}
	if err := os.WriteFile(dst, out, 0o600); err != nil {
		return err
	}
	// The same decoding (strict: unknown fields are errors) and validation
	// that kube-scheduler applies to --config.
	loaded, err := scheduleroptions.LoadConfigFromFile(klog.Background(), dst)
	if err != nil {
		return fail("%v", err)
	}
	if err := schedulervalidation.ValidateKubeSchedulerConfiguration(loaded); err != nil {
		return fail("%v", err)
	}
	return nil
}

// schedulerLogger builds a logger for the scheduler alone from its --v and
// --vmodule flags (klog's global settings are the API server's).
func schedulerLogger(fs *pflag.FlagSet) (klog.Logger, error) {
	v, err := strconv.Atoi(fs.Lookup("v").Value.String())
	if err != nil {
		return klog.Logger{}, fmt.Errorf("--v: %w", err)
	}
	c := textlogger.NewConfig(textlogger.Verbosity(v))
	if vm := fs.Lookup("vmodule").Value.String(); vm != "" {
		if err := c.VModule().Set(vm); err != nil {
			return klog.Logger{}, fmt.Errorf("--vmodule: %w", err)
		}
	}
	return textlogger.NewLogger(c), nil
}
