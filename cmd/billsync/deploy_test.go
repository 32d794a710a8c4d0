package main

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	stripemock "github.com/billsync/billsync/mocks/stripe"
	"github.com/billsync/billsync/mocks/testenv"
	"github.com/billsync/billsync/server"
)

// deployDir is the repository's deploy/ folder.
var deployDir = filepath.Join("..", "..", "deploy")

// TestAlertRules checks deploy/prometheus/alerts.yml and slo.yml with Prometheus's own
// promtool: the rules parse, and the unit tests in alerts_test.yml and
// slo_test.yml (series
// that must and must not fire each alert) pass. Skipped without promtool
// (Debian's prometheus) unless CI=true.
func TestAlertRules(t *testing.T) {
	promtool := needTool(t, "promtool", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}, {"check", "rules", "slo.yml"}, {"test", "rules", "slo_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = filepath.Join(deployDir, "prometheus")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
		require.Contains(t, string(out), "SUCCESS")
	}
}

// alertRules are deploy/prometheus/alerts.yml's and slo.yml's groups, in
// the Prometheus Operator's types (a PrometheusRule's spec is the same
// document).
type alertRules struct {
	Groups []monitoringv1.RuleGroup `json:"groups"`
}

// ruleFiles are the rule files in deploy/prometheus, in the order the
// PrometheusRule carries their groups.
var ruleFiles = []string{"alerts.yml", "slo.yml"}

func readAlerts(t *testing.T) alertRules {
	t.Helper()
	var all alertRules
	for _, name := range ruleFiles {
		var rules alertRules
		b, err := os.ReadFile(filepath.Join(deployDir, "prometheus", name))
		require.NoError(t, err)
		require.NoError(t, yaml.UnmarshalStrict(b, &rules), name)
		require.NotEmpty(t, rules.Groups, name)
		all.Groups = append(all.Groups, rules.Groups...)
	}
	return all
}

// manifests are deploy/kubernetes's objects, decoded strictly.
type manifests struct {
	deployment *appsv1.Deployment
	job        *batchv1.Job
	service    *corev1.Service
	pdb        *policyv1.PodDisruptionBudget
	monitor    *monitoringv1.ServiceMonitor
	rule       *monitoringv1.PrometheusRule
}

// readManifests decodes every file kustomization.yaml lists into its
// Kubernetes (or Prometheus Operator) type; an unknown or misspelt field
// fails, as does a file in the folder that kustomization.yaml leaves out.
func readManifests(t *testing.T) manifests {
	t.Helper()
	dir := filepath.Join(deployDir, "kubernetes")
	var kust struct {
		APIVersion string   `json:"apiVersion"`
		Kind       string   `json:"kind"`
		Resources  []string `json:"resources"`
		Images     []struct {
			Name    string `json:"name"`
			NewName string `json:"newName"`
			NewTag  string `json:"newTag"`
		} `json:"images"`
	}
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(b, &kust), "kustomization.yaml")
	require.Equal(t, "Kustomization", kust.Kind)
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	require.NoError(t, err)
	var listed []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			listed = append(listed, filepath.Base(f))
		}
	}
	require.ElementsMatch(t, listed, kust.Resources, "every manifest is in kustomization.yaml, and only those")

	var m manifests
	for _, name := range kust.Resources {
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		var meta struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
		}
		require.NoError(t, yaml.Unmarshal(b, &meta), name)
		var obj any
		switch meta.APIVersion + " " + meta.Kind {
		case "apps/v1 Deployment":
			m.deployment = new(appsv1.Deployment)
			obj = m.deployment
		case "batch/v1 Job":
			m.job = new(batchv1.Job)
			obj = m.job
		case "v1 Service":
			m.service = new(corev1.Service)
			obj = m.service
		case "policy/v1 PodDisruptionBudget":
			m.pdb = new(policyv1.PodDisruptionBudget)
			obj = m.pdb
		case "monitoring.coreos.com/v1 ServiceMonitor":
			m.monitor = new(monitoringv1.ServiceMonitor)
			obj = m.monitor
		case "monitoring.coreos.com/v1 PrometheusRule":
			m.rule = new(monitoringv1.PrometheusRule)
			obj = m.rule
		default:
			t.Fatalf("%s: unexpected %s %s", name, meta.APIVersion, meta.Kind)
		}
		require.NoError(t, yaml.UnmarshalStrict(b, obj), "%s must decode strictly into %s", name, meta.Kind)
	}
	require.NotNil(t, m.deployment, "a Deployment")
	require.NotNil(t, m.job, "a migrate Job")
	require.NotNil(t, m.service, "a Service")
	require.NotNil(t, m.pdb, "a PodDisruptionBudget")
	require.NotNil(t, m.monitor, "a ServiceMonitor")
	require.NotNil(t, m.rule, "a PrometheusRule")
	for _, img := range kust.Images {
		require.Equal(t, "billsync", img.Name, "the manifests name the image billsync; kustomize replaces it")
	}
	return m
}

// envRead returns every environment variable billsync's serve reads, by
// running serve's own configuration code with a recording getenv: flags,
// secrets (NAME and NAME_FILE) and the logger.
func envRead(t *testing.T) map[string]bool {
	t.Helper()
	read := map[string]bool{}
	getenv := func(name string) string { read[name] = true; return "" }
	var cfg config
	cfg.bindServe(flag.NewFlagSet("serve", flag.ContinueOnError), getenv)
	_ = cfg.loadSecrets(getenv)
	_, err := newLogger(io.Discard, getenv)
	require.NoError(t, err)
	require.True(t, read["DATABASE_URL"] && read["STRIPE_WEBHOOK_SECRET_FILE"], "the recorder sees serve's reads: %v", read)
	return read
}

// parseArgs parses a container's arguments with the subcommand's own flags.
func parseArgs(t *testing.T, args []string) config {
	t.Helper()
	require.NotEmpty(t, args, "the container names a subcommand (the image's entrypoint is billsync)")
	var cfg config
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	switch args[0] {
	case "serve":
		cfg.bindServe(fs, func(string) string { return "" })
	case "migrate":
		cfg.bindCommon(fs, func(string) string { return "" })
	default:
		t.Fatalf("unexpected subcommand %q", args[0])
	}
	require.NoError(t, fs.Parse(args[1:]), "%v must be flags billsync %s knows", args, args[0])
	require.Empty(t, fs.Args(), "%v: stray arguments", args)
	return cfg
}

func TestKubernetesManifests(t *testing.T) {
	m := readManifests(t)
	env := envRead(t)
	// Routes, asked of billsync's own handler: a probe at a path it does
	// not serve would fail forever.
	routes := httptest.NewServer(server.New(server.Config{}))
	t.Cleanup(routes.Close)
	routeExists := func(path string) bool {
		resp, err := http.Get(routes.URL + path)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	require.False(t, routeExists("/no-such-route"), "the route check can fail")

	d := m.deployment
	require.EqualValues(t, 3, *d.Spec.Replicas)
	pod := d.Spec.Template.Spec
	require.Len(t, pod.Containers, 1)
	c := pod.Containers[0]
	cfg := parseArgs(t, c.Args)
	require.Equal(t, "serve", c.Args[0])
	require.True(t, cfg.NoMigrate, "serve runs with -no-migrate: the Job migrates")
	require.Equal(t, []string{"migrate"}, m.job.Spec.Template.Spec.Containers[0].Args[:1])
	parseArgs(t, m.job.Spec.Template.Spec.Containers[0].Args)

	// SIGKILL must not cut serve's drain short: the grace period covers the
	// preStop sleep, -shutdown-timeout, and one -db-timeout (serve's bound
	// when the database hangs).
	var preStop time.Duration
	if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Sleep != nil {
		preStop = time.Duration(c.Lifecycle.PreStop.Sleep.Seconds) * time.Second
	}
	require.NotNil(t, pod.TerminationGracePeriodSeconds)
	grace := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
	require.Greater(t, grace, preStop+cfg.ShutdownTimeout+cfg.DBTimeout,
		"terminationGracePeriodSeconds %v must exceed preStop %v + -shutdown-timeout %v + -db-timeout %v", grace, preStop, cfg.ShutdownTimeout, cfg.DBTimeout)

	require.NotNil(t, c.ReadinessProbe)
	require.NotNil(t, c.LivenessProbe)
	require.Equal(t, "/readyz", c.ReadinessProbe.HTTPGet.Path)
	require.Equal(t, "/healthz", c.LivenessProbe.HTTPGet.Path)
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, probe := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		require.True(t, routeExists(probe.HTTPGet.Path), "probe path %s is no billsync route", probe.HTTPGet.Path)
		require.Contains(t, ports, probe.HTTPGet.Port.String(), "probe port names a container port")
	}

	// Every variable is one billsync reads; _FILE ones point into a
	// mounted secret volume; the listen address is the container port.
	mounts := map[string]string{}
	for _, vm := range c.VolumeMounts {
		mounts[vm.Name] = vm.MountPath
	}
	secretVolumes := map[string]*corev1.SecretVolumeSource{}
	for _, v := range pod.Volumes {
		if v.Secret != nil {
			secretVolumes[v.Name] = v.Secret
		}
	}
	for _, job := range []corev1.Container{c, m.job.Spec.Template.Spec.Containers[0]} {
		for _, e := range job.Env {
			require.True(t, env[e.Name], "%s: %s is not a variable billsync reads", job.Name, e.Name)
		}
	}
	var files int
	for _, e := range c.Env {
		switch {
		case strings.HasSuffix(e.Name, "_FILE"):
			files++
			inSecret := false
			for name, path := range mounts {
				if v := secretVolumes[name]; v != nil && filepath.Dir(e.Value) == path {
					inSecret = slices.ContainsFunc(v.Items, func(k corev1.KeyToPath) bool { return k.Path == filepath.Base(e.Value) })
				}
			}
			require.True(t, inSecret, "%s=%s is no file of a mounted secret", e.Name, e.Value)
			require.False(t, slices.ContainsFunc(c.Env, func(o corev1.EnvVar) bool { return o.Name == strings.TrimSuffix(e.Name, "_FILE") }),
				"%s and its value form are both set: billsync refuses that", e.Name)
		case e.Name == "BILLSYNC_ADDR":
			require.True(t, strings.HasSuffix(e.Value, ":8080") && ports["http"] == 8080, "BILLSYNC_ADDR %s listens on the container port", e.Value)
		}
	}
	require.GreaterOrEqual(t, files, 2, "the secrets come as files")

	sc := pod.SecurityContext
	require.True(t, sc != nil && sc.RunAsNonRoot != nil && *sc.RunAsNonRoot, "runAsNonRoot")
	require.True(t, c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem)

	// The Service, the budget and the monitor select the serving pods and
	// not the migrate Job's.
	podLabels := labels.Set(d.Spec.Template.Labels)
	jobLabels := labels.Set(m.job.Spec.Template.Labels)
	svcSel := labels.SelectorFromSet(m.service.Spec.Selector)
	require.True(t, svcSel.Matches(podLabels))
	require.False(t, svcSel.Matches(jobLabels), "the Service must not route to the migrate Job")
	require.Equal(t, "http", m.service.Spec.Ports[0].TargetPort.String())
	require.True(t, labels.SelectorFromSet(m.pdb.Spec.Selector.MatchLabels).Matches(podLabels))
	require.True(t, labels.SelectorFromSet(d.Spec.Selector.MatchLabels).Matches(podLabels))
	require.True(t, labels.SelectorFromSet(m.monitor.Spec.Selector.MatchLabels).Matches(labels.Set(m.service.Labels)))
	require.Equal(t, "http", m.monitor.Spec.Endpoints[0].Port)
	require.Equal(t, "/metrics", m.monitor.Spec.Endpoints[0].Path)

	// The PrometheusRule carries exactly alerts.yml's and slo.yml's groups.
	alerts := readAlerts(t)
	require.Equal(t, alerts.Groups, m.rule.Spec.Groups, "prometheusrule.yaml's groups must be alerts.yml's and slo.yml's: copy them over")
}

// metricName matches the billsync_* metric names in PromQL text.
var metricName = regexp.MustCompile(`\bbillsync_[a-z0-9_]+\b`)

// TestDeployNamesExistingMetrics scrapes a running `billsync serve` (its
// workers reconciling against the fake Stripe, a sweep done, an unmapped
// price met) and fails when the dashboard, the alert rules or
// docs/metrics.md name a metric it does not serve, or when docs/metrics.md
// leaves out one it serves.
func TestDeployNamesExistingMetrics(t *testing.T) {
	served := scrapeServe(t)

	named := map[string][]string{} // metric → where
	b, err := os.ReadFile(filepath.Join(deployDir, "grafana", "billsync.json"))
	require.NoError(t, err)
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &dash))
	require.NotEmpty(t, dash.Panels)
	for _, p := range dash.Panels {
		require.NotEmpty(t, p.Targets, "panel %q queries nothing", p.Title)
		for _, tg := range p.Targets {
			names := metricName.FindAllString(tg.Expr, -1)
			require.NotEmpty(t, names, "panel %q: %s names no billsync metric", p.Title, tg.Expr)
			for _, n := range names {
				named[n] = append(named[n], "dashboard panel "+p.Title)
			}
		}
	}
	alerts := readAlerts(t)
	for _, g := range alerts.Groups {
		for _, r := range g.Rules {
			for _, n := range metricName.FindAllString(r.Expr.String(), -1) {
				named[n] = append(named[n], "rule "+cmp.Or(r.Alert, r.Record))
			}
		}
	}
	require.NotEmpty(t, named)
	for n, where := range named {
		require.True(t, served[n], "%s (named by %s) is not among the metrics billsync serves", n, strings.Join(where, ", "))
	}

	// docs/metrics.md lists every metric served, and names none that
	// billsync does not define (a vector with no series yet is not served,
	// so those are checked against the server package's source).
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "metrics.md"))
	require.NoError(t, err)
	documented := map[string]bool{}
	for _, n := range metricName.FindAllString(string(doc), -1) {
		documented[n] = true
	}
	for n := range served {
		if !strings.HasPrefix(n, "billsync_") || strings.HasSuffix(n, "_bucket") || strings.HasSuffix(n, "_sum") || strings.HasSuffix(n, "_count") {
			continue
		}
		require.True(t, documented[n], "%s is served but not in docs/metrics.md", n)
	}
	srcs, err := filepath.Glob(filepath.Join("..", "..", "server", "*.go"))
	require.NoError(t, err)
	var src strings.Builder
	for _, f := range srcs {
		if !strings.HasSuffix(f, "_test.go") {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			src.Write(b)
		}
	}
	for n := range documented {
		require.True(t, served[n] || strings.Contains(src.String(), `"`+n+`"`), "docs/metrics.md names %s, which billsync does not define", n)
	}
}

// scrapeServe runs `billsync serve` with its workers, a frequent sweep and
// a frequent events feed against the fake Stripe (its webhook endpoint
// registered) and a connected account's feed, makes traffic that gives
// every vector metric a series (a
// mapped and an unmapped price, a sweep, events the feed sees, a change
// delivered to an app endpoint), and returns the names
// of the series /metrics serves (histograms' _bucket, _sum and _count).
func scrapeServe(t *testing.T) map[string]bool {
	t.Helper()
	h := testenv.ForTest(t, testenv.Stripe, testenv.Options{})
	addr := freeAddr(t)
	secret := h.Stripe.Fake.AddWebhookEndpoint("http://" + addr + "/webhooks/stripe")
	dataDir := filepath.Join(reachableDir(t), "data")
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(app.Close)
	// A connected account, served (-stripe-connect all): its feed is
	// discovered and polled, so the Connect feed's series are served.
	h.ConnectedAccount("acct_scrape")
	proc := startBillsync(t, dataDir, addr, "BILLSYNC_APP_WEBHOOK_URL="+app.URL, "BILLSYNC_APP_WEBHOOK_SECRET="+testAppSecret,
		"BILLSYNC_TEST_ARGS=serve -workers 2 -events-poll 1s -stripe-read-allocation 1e12 -stripe-connect all -addr "+addr+" -data-dir "+dataDir, "BILLSYNC_SWEEP_SCHEDULE=@every 1s",
		"STRIPE_WEBHOOK_SECRET="+secret, "STRIPE_API_KEY="+stripemock.DefaultAPIKey, "STRIPE_API_URL="+h.URL)
	ctx := context.Background()
	for _, price := range []string{"price_team", "price_legacy"} {
		customer, err := h.Stripe.Customer(ctx, "user_"+price)
		require.NoError(t, err)
		_, err = h.Stripe.Subscribe(ctx, customer, price)
		require.NoError(t, err)
	}
	want := []*regexp.Regexp{
		// Any result: under load the sweep (every second) may heal the
		// mapped customer before a worker applies it.
		regexp.MustCompile(`(?m)^billsync_reconciles_total\{provider="stripe",result="[a-z]+"\} [1-9]`),
		regexp.MustCompile(`(?m)^billsync_unmapped_prices_total\{price="[^"]+",provider="stripe"\} [1-9]`),
		regexp.MustCompile(`(?m)^billsync_sweep_last_success_timestamp_seconds\{provider="stripe"\} `),
		regexp.MustCompile(`(?m)^billsync_events_feed_lag_seconds\{provider="stripe"\} `),
		regexp.MustCompile(`(?m)^billsync_stripe_webhook_endpoint_enabled\{endpoint="we_[^"]+",provider="stripe"\} 1`),
		regexp.MustCompile(`(?m)^billsync_app_delivery_attempts_total\{code="204",result="delivered"\} [1-9]`),
		regexp.MustCompile(`(?m)^billsync_connect_feed_oldest_poll_age_seconds\{provider="stripe"\} `),
		// The connected account's first sweep (its import) succeeded.
		regexp.MustCompile(`(?m)^billsync_connect_sweep_oldest_success_age_seconds\{provider="stripe"\} `),
	}
	var text string
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		text = scrape(t, addr)
		if !slices.ContainsFunc(want, func(re *regexp.Regexp) bool { return !re.MatchString(text) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve never reconciled, met the unmapped price, swept, polled the events feed and a connected account's, and delivered a change:\n%s\n/metrics:\n%s", proc.logs.String(), text)
		}
	}
	stopBillsync(t, proc)

	served := map[string]bool{}
	for line := range strings.Lines(text) {
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, _, _ := strings.Cut(line, "{")
		name, _, _ = strings.Cut(name, " ")
		served[strings.TrimSpace(name)] = true
	}
	require.True(t, served["billsync_reconcile_seconds_bucket"], "the scrape is parsed: %v", served)
	return served
}

// TestAlertRunbooks: every alert has a runbook_url at a section of
// docs/deploy.md that exists.
func TestAlertRunbooks(t *testing.T) {
	alerts := readAlerts(t)
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "deploy.md"))
	require.NoError(t, err)
	anchors := map[string]bool{}
	for line := range strings.Lines(string(doc)) {
		if title, ok := strings.CutPrefix(line, "#"); ok {
			slug := strings.ToLower(strings.TrimSpace(strings.TrimLeft(title, "#")))
			anchors[strings.ReplaceAll(regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(slug, ""), " ", "-")] = true
		}
	}
	const base = "https://github.com/billsync/billsync/blob/main/docs/deploy.md#"
	for _, g := range alerts.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" {
				continue // a recording rule
			}
			url := r.Annotations["runbook_url"]
			anchor, ok := strings.CutPrefix(url, base)
			require.True(t, ok, "%s: runbook_url %q is not a section of docs/deploy.md", r.Alert, url)
			require.True(t, anchors[anchor], "%s: docs/deploy.md has no section #%s", r.Alert, anchor)
		}
	}
}
