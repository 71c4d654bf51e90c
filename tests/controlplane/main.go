// controlplane: a real Kubernetes control plane for tests, in one loopback process and nothing else.
//
//	etcd             embedded (go.etcd.io/etcd/server/v3/embed), data in <dir>/etcd, fsync off
//	kube-apiserver   the real one (k8s.io/kubernetes/cmd/kube-apiserver/app), TLS from a CA generated here,
//	                 static token authentication, RBAC authorization
//	disruption       the real PodDisruptionBudget controller (k8s.io/kubernetes/pkg/controller/disruption),
//	                 so a PDB's status (disruptionsAllowed, currentHealthy...) is computed as in a cluster
//	helper HTTP      POST /compact compacts etcd the way kube-apiserver's own compactor does, so tests can
//	                 expire continue tokens and resourceVersions on demand
//
// No kubelet, scheduler or other controller: tests create Nodes through the API and set Pod status
// themselves. Every port is on 127.0.0.1, chosen free at start; when everything is ready the program writes
// <dir>/state.json (ports, CA file, tokens) in one rename, which is what tests/kube_real/conftest.py waits for.
// It stops on SIGTERM/SIGINT or when its stdin closes (the test process that started it has gone).
//
// `controlplane drain-verdicts` is another program in the same binary (one build, one cache): kubectl
// drain's pod filters as an oracle (drain.go).
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/scale"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
	"k8s.io/kubernetes/cmd/kube-apiserver/app/options"
	"k8s.io/kubernetes/pkg/controller/disruption"
)

// Users in the static token file. The hook's user is the subject deploy/rbac.yaml binds, so applying that
// file unchanged grants it exactly the project's ClusterRole and Role. The spare users belong to no group
// but system:authenticated: tests bind them to roles of their own (one RBAC rule removed, say).
const (
	hookUser   = "ack-mig-hook-function-ram-role-id"
	// A kubelet's identity (group system:nodes): the Node authorizer and NodeRestriction limit it to its own
	// Node, as they limit node_bootstrap's kubelet credential on a real node.
	nodeName = "kube-real-node"
	nodeUser = "system:node:" + nodeName
	spareUsers = 16
)

type state struct {
	PID         int               `json:"pid"`
	Server      string            `json:"server"` // https://127.0.0.1:<port>
	CAFile      string            `json:"ca_file"`
	AdminToken  string            `json:"admin_token"` // group system:masters
	HookToken   string            `json:"hook_token"`  // user hookUser, no group
	HookUser    string            `json:"hook_user"`
	SpareTokens map[string]string `json:"spare_tokens"` // user name -> token
	NodeToken   string            `json:"node_token"`   // user nodeUser, group system:nodes
	NodeName    string            `json:"node_name"`
	Etcd        string            `json:"etcd"`         // http://127.0.0.1:<port>
	Helper      string            `json:"helper"`       // http://127.0.0.1:<port> (POST /compact)
	StartupSecs float64           `json:"startup_seconds"`
	Versions    map[string]string `json:"versions"`
}

// Other uses of this binary: `controlplane <name>` (drain.go: drain-verdicts).
var subcommands = map[string]func() error{}

func main() {
	if len(os.Args) > 1 {
		if sub, ok := subcommands[os.Args[1]]; ok {
			if err := sub(); err != nil {
				fmt.Fprintln(os.Stderr, "controlplane "+os.Args[1]+":", err)
				os.Exit(1)
			}
			return
		}
	}
	dir := flag.String("dir", "", "state directory (created; state.json is written there when ready)")
	logLevel := flag.Int("v", 0, "kube-apiserver log verbosity")
	flag.Parse()
	if *dir == "" {
		fmt.Fprintln(os.Stderr, "usage: controlplane -dir DIR")
		os.Exit(2)
	}
	if err := run(*dir, *logLevel); err != nil {
		fmt.Fprintln(os.Stderr, "controlplane:", err)
		os.Exit(1)
	}
}

func run(dir string, verbosity int) error {
	started := time.Now()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go func() { // the parent's end of our stdin closes when it exits, however it exits
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()

	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	pki, err := writePKI(dir)
	if err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	tokens, err := writeTokens(dir)
	if err != nil {
		return fmt.Errorf("tokens: %w", err)
	}

	etcd, etcdURL, err := startEtcd(filepath.Join(dir, "etcd"))
	if err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	defer etcd.Close()

	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	apiErr, loopback, err := startAPIServer(ctx, dir, apiLn, etcdURL, pki, verbosity)
	if err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	client, err := kubernetes.NewForConfig(loopback)
	if err != nil {
		return err
	}
	if err := waitReady(ctx, client, apiErr); err != nil {
		return err
	}
	if err := startDisruptionController(ctx, client, loopback); err != nil {
		return fmt.Errorf("disruption controller: %w", err)
	}
	helperURL, err := startHelper(etcdURL)
	if err != nil {
		return fmt.Errorf("helper: %w", err)
	}

	st := state{
		PID:         os.Getpid(),
		Server:      "https://" + apiLn.Addr().String(),
		CAFile:      pki.caFile,
		AdminToken:  tokens["admin"],
		HookToken:   tokens[hookUser],
		HookUser:    hookUser,
		SpareTokens: map[string]string{},
		NodeToken:   tokens[nodeUser],
		NodeName:    nodeName,
		Etcd:        etcdURL,
		Helper:      helperURL,
		StartupSecs: time.Since(started).Seconds(),
		Versions:    versions(),
	}
	for i := 0; i < spareUsers; i++ {
		name := "spare-" + strconv.Itoa(i)
		st.SpareTokens[name] = tokens[name]
	}
	if err := writeJSONAtomic(filepath.Join(dir, "state.json"), st); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "controlplane: ready in %.1fs at %s\n", st.StartupSecs, st.Server)

	select {
	case <-ctx.Done():
	case err := <-apiErr:
		return fmt.Errorf("kube-apiserver stopped: %v", err)
	}
	// kube-apiserver drains for up to --shutdown-delay-duration (0 here) and then returns.
	select {
	case <-apiErr:
	case <-time.After(10 * time.Second):
	}
	return nil
}

// --- kube-apiserver -----------------------------------------------------------------------------------------

func startAPIServer(ctx context.Context, dir string, ln net.Listener, etcdURL string, pki pkiFiles, verbosity int) (<-chan error, *restConfig, error) {
	s := options.NewServerRunOptions()
	fs := pflag.NewFlagSet("kube-apiserver", pflag.ContinueOnError)
	for _, f := range s.Flags().FlagSets {
		fs.AddFlagSet(f)
	}
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	_ = klogFlags.Set("v", strconv.Itoa(verbosity))

	args := []string{
		"--etcd-servers=" + etcdURL,
		// The apiserver compacts etcd every 5 min by default; here only POST /compact does (a test's choice).
		"--etcd-compaction-interval=0",
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none", // a loopback address cannot be a Service endpoint
		"--service-cluster-ip-range=10.96.0.0/16",
		"--tls-cert-file=" + pki.serverCert,
		"--tls-private-key-file=" + pki.serverKey,
		"--token-auth-file=" + filepath.Join(dir, "tokens.csv"),
		"--anonymous-auth=false",
		// Node first, as kubeadm and ACK configure it: a kubelet's requests are judged by the Node authorizer.
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + pki.saKey,
		"--service-account-signing-key-file=" + pki.saKey,
		// No ServiceAccount controller runs, so the ServiceAccount admission plugin would refuse every pod
		// (its namespace has no "default" ServiceAccount). The other default plugins stay on, as in a cluster
		// (TaintNodesByCondition, for one, taints every new Node node.kubernetes.io/not-ready).
		"--disable-admission-plugins=ServiceAccount",
		// Priority-and-fairness bootstraps a dozen objects and runs its own controllers: startup time only.
		"--enable-priority-and-fairness=false",
		// With the cache snapshots of a paginated list (beta, on by default since 1.34), a continue token
		// outlives an etcd compaction until the watch cache polls the compaction (every 15 s). Off, a
		// continue request reads etcd and a compacted one is 410 Gone at once, as in a cluster minutes later.
		"--feature-gates=ListFromCacheSnapshot=false",
		"--profiling=false",
		"--shutdown-delay-duration=0s",
		"--shutdown-send-retry-after=false",
	}
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	s.SecureServing.Listener = ln
	s.SecureServing.BindPort = ln.Addr().(*net.TCPAddr).Port
	if err := s.GenericServerRunOptions.ComponentGlobalsRegistry.Set(); err != nil {
		return nil, nil, err
	}
	completedOptions, err := s.Complete(ctx)
	if err != nil {
		return nil, nil, err
	}
	if errs := completedOptions.Validate(); len(errs) != 0 {
		return nil, nil, errors.Join(errs...)
	}
	config, err := app.NewConfig(completedOptions)
	if err != nil {
		return nil, nil, err
	}
	completed, err := config.Complete()
	if err != nil {
		return nil, nil, err
	}
	server, err := app.CreateServerChain(completed)
	if err != nil {
		return nil, nil, err
	}
	prepared, err := server.PrepareRun()
	if err != nil {
		return nil, nil, err
	}
	done := make(chan error, 1)
	go func() { done <- prepared.Run(ctx) }()
	return done, server.GenericAPIServer.LoopbackClientConfig, nil
}

func waitReady(ctx context.Context, client kubernetes.Interface, apiErr <-chan error) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case err := <-apiErr:
			return fmt.Errorf("kube-apiserver stopped while starting: %v", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		status := 0
		client.CoreV1().RESTClient().Get().AbsPath("/readyz").Do(ctx).StatusCode(&status)
		if status == http.StatusOK {
			// readyz covers the post-start hooks (RBAC bootstrap roles among them); the default namespace
			// comes from the system-namespaces controller just after.
			if _, err := client.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-apiserver not ready after 60s (/readyz %d)", status)
		}
	}
}

// --- disruption controller ----------------------------------------------------------------------------------

// As kube-controller-manager starts it (cmd/kube-controller-manager/app/policy.go), on the apiserver's own
// loopback credential instead of a controller service account.
func startDisruptionController(ctx context.Context, client kubernetes.Interface, config *restConfig) error {
	factory := informers.NewSharedInformerFactory(client, 0)
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(client.Discovery()))
	scaleClient, err := scale.NewForConfig(config, mapper, dynamic.LegacyAPIPathResolverFunc,
		scale.NewDiscoveryScaleKindResolver(client.Discovery()))
	if err != nil {
		return err
	}
	dc := disruption.NewDisruptionController(ctx,
		factory.Core().V1().Pods(),
		factory.Policy().V1().PodDisruptionBudgets(),
		factory.Core().V1().ReplicationControllers(),
		factory.Apps().V1().ReplicaSets(),
		factory.Apps().V1().Deployments(),
		factory.Apps().V1().StatefulSets(),
		client, mapper, scaleClient, client.Discovery())
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer %v did not sync", typ)
		}
	}
	go dc.Run(ctx, 5)
	return nil
}

// --- etcd ---------------------------------------------------------------------------------------------------

func startEtcd(dataDir string) (*embed.Etcd, string, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ { // embed takes URLs, not listeners: a port can be taken between
		clientPort, err1 := freePort() //          freePort and etcd's bind, so retry with new ones
		peerPort, err2 := freePort()
		if err := errors.Join(err1, err2); err != nil {
			return nil, "", err
		}
		_ = os.RemoveAll(dataDir)
		cfg := embed.NewConfig()
		cfg.Name = "test"
		cfg.Dir = dataDir
		cfg.UnsafeNoFsync = true // test data: speed over durability
		cfg.LogLevel = "error"
		clientURL := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(clientPort)}
		peerURL := url.URL{Scheme: "http", Host: "127.0.0.1:" + strconv.Itoa(peerPort)}
		cfg.ListenClientUrls = []url.URL{clientURL}
		cfg.AdvertiseClientUrls = []url.URL{clientURL}
		cfg.ListenPeerUrls = []url.URL{peerURL}
		cfg.AdvertisePeerUrls = []url.URL{peerURL}
		cfg.ListenMetricsUrls = nil
		cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
		e, err := embed.StartEtcd(cfg)
		if err != nil {
			lastErr = err
			continue
		}
		select {
		case <-e.Server.ReadyNotify():
			return e, clientURL.String(), nil
		case <-time.After(30 * time.Second):
			e.Close()
			return nil, "", errors.New("etcd not ready after 30s")
		}
	}
	return nil, "", lastErr
}

// --- helper HTTP: compaction on demand -----------------------------------------------------------------------

func startHelper(etcdURL string) (string, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{etcdURL}, DialTimeout: 5 * time.Second})
	if err != nil {
		return "", err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /compact", func(w http.ResponseWriter, r *http.Request) {
		rev, err := compact(r.Context(), cli)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]int64{"revision": rev})
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	go func() { _ = http.Serve(ln, mux) }()
	return "http://" + ln.Addr().String(), nil
}

// compact does what kube-apiserver's compactor does every --etcd-compaction-interval
// (k8s.io/apiserver/pkg/storage/etcd3/compact.go): record the revision under compact_rev_key (kube-apiserver
// watches that key to learn the compacted revision) and compact etcd there. The revision is a fresh one,
// past every resourceVersion handed out before the call (a read at the compacted revision itself still
// succeeds), so every continue token and resourceVersion issued before expires.
func compact(ctx context.Context, cli *clientv3.Client) (int64, error) {
	const key = "compact_rev_key"
	bump, err := cli.Put(ctx, "/ack-mig-hook-test/compact-marker", time.Now().String())
	if err != nil {
		return 0, err
	}
	rev := bump.Header.Revision
	for {
		cur, err := cli.Get(ctx, key)
		if err != nil {
			return 0, err
		}
		version := int64(0)
		if len(cur.Kvs) > 0 {
			version = cur.Kvs[0].Version
		}
		txn, err := cli.Txn(ctx).If(clientv3.Compare(clientv3.Version(key), "=", version)).
			Then(clientv3.OpPut(key, strconv.FormatInt(rev, 10))).Commit()
		if err != nil {
			return 0, err
		}
		if txn.Succeeded {
			break
		}
	}
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return 0, err
	}
	return rev, nil
}

// --- files --------------------------------------------------------------------------------------------------

type pkiFiles struct{ caFile, serverCert, serverKey, saKey string }

// A CA, a serving certificate for 127.0.0.1/localhost signed by it, and a service account signing key
// (kube-apiserver requires one). ECDSA P-256: generated in milliseconds.
func writePKI(dir string) (pkiFiles, error) {
	f := pkiFiles{
		caFile:     filepath.Join(dir, "ca.crt"),
		serverCert: filepath.Join(dir, "apiserver.crt"),
		serverKey:  filepath.Join(dir, "apiserver.key"),
		saKey:      filepath.Join(dir, "sa.key"),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "ack-mig-hook test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return f, err
	}
	caCert, _ := x509.ParseCertificate(caDER)
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return f, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	writes := []struct {
		path, typ string
		der       []byte
	}{
		{f.caFile, "CERTIFICATE", caDER},
		{f.serverCert, "CERTIFICATE", srvDER},
		{f.serverKey, "EC PRIVATE KEY", mustMarshalEC(srvKey)},
		{f.saKey, "EC PRIVATE KEY", mustMarshalEC(saKey)},
	}
	for _, w := range writes {
		if err := os.WriteFile(w.path, pem.EncodeToMemory(&pem.Block{Type: w.typ, Bytes: w.der}), 0o600); err != nil {
			return f, err
		}
	}
	return f, nil
}

func mustMarshalEC(k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		panic(err)
	}
	return der
}

// tokens.csv: token,user,uid[,"group1,group2"] (kube-apiserver --token-auth-file).
func writeTokens(dir string) (map[string]string, error) {
	tokens := map[string]string{}
	var csv []byte
	add := func(user, groups string) {
		b := make([]byte, 24)
		_, _ = rand.Read(b)
		tok := hex.EncodeToString(b)
		tokens[user] = tok
		line := tok + "," + user + "," + user
		if groups != "" {
			line += ",\"" + groups + "\""
		}
		csv = append(csv, line+"\n"...)
	}
	add("admin", "system:masters")
	add(hookUser, "")
	add(nodeUser, "system:nodes")
	for i := 0; i < spareUsers; i++ {
		add("spare-"+strconv.Itoa(i), "")
	}
	return tokens, os.WriteFile(filepath.Join(dir, "tokens.csv"), csv, 0o600)
}

func writeJSONAtomic(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
