package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/agenthost/host/internal/annot"
	"github.com/agenthost/host/internal/app"
	"github.com/agenthost/host/internal/bus"
	"github.com/agenthost/host/internal/hooks"
	"github.com/agenthost/host/internal/host"
	"github.com/agenthost/host/internal/pgsource"
	"github.com/agenthost/host/internal/runner"
	"github.com/agenthost/host/internal/s3events"
	"github.com/agenthost/host/internal/sandbox"
	"github.com/agenthost/host/internal/secrets"
	"github.com/agenthost/host/internal/web"
	"github.com/agenthost/host/internal/webauth"
)

type serveFlags struct {
	cfg          app.Config
	hooks        []string
	permit       []string
	resolve      []string
	secretsKey   string
	s3           s3Flags
	natsListen   string
	mqttListen   string
	natsConfig   string
	natsAuth     bool
	natsSync     time.Duration
	httpAddr     string
	httpToken    string
	drainTimeout time.Duration
	jobDisk      int64
	warm         int
	storeLimits  []string
	oidc         oidcFlags
}

// oidcFlags are serve's --oidc-* flags, read into app.Config.OIDC by configure.
type oidcFlags struct {
	issuer, clientID, secretFile, groupsClaim, redirectURL, defaultRole string
	roles, scopes                                                       []string
}

func (o *oidcFlags) register(fl *pflag.FlagSet) {
	fl.StringVar(&o.issuer, "oidc-issuer", "", "log people in to the dashboard through this OpenID Connect provider (its issuer URL); its discovery document must answer within 30 s of start")
	fl.StringVar(&o.clientID, "oidc-client-id", "", "the client ID this host is registered as at the OpenID provider")
	fl.StringVar(&o.secretFile, "oidc-client-secret-file", "", "file holding the OpenID client's secret (its first line)")
	fl.StringVar(&o.groupsClaim, "oidc-groups-claim", webauth.DefaultGroupsClaim, "ID token claim listing the person's groups, which --oidc-role maps to roles")
	fl.StringArrayVar(&o.roles, "oidc-role", nil, "<group>=<role>: members of the provider's group get the role (viewer, runner, approver, developer, admin); a person in several groups gets the highest (repeatable). A stored user (host users add) of the same name gets its own role and groups instead")
	fl.StringVar(&o.defaultRole, "oidc-default-role", "none", "role of a person in none of the --oidc-role groups; none refuses them the login")
	fl.StringVar(&o.redirectURL, "oidc-redirect-url", "", "the callback to register at the provider (default: <--public-url>"+webauth.CallbackPath+")")
	fl.StringSliceVar(&o.scopes, "oidc-scopes", webauth.DefaultScopes, "scopes asked for besides openid (add groups for providers that send the groups claim only then: Dex, Keycloak)")
}

// config reads the --oidc-* flags; none of them without --oidc-issuer.
func (o *oidcFlags) config() (webauth.OIDCConfig, error) {
	if o.issuer == "" {
		if o.clientID != "" || o.secretFile != "" || len(o.roles) > 0 || o.redirectURL != "" {
			return webauth.OIDCConfig{}, errors.New("--oidc-client-id, --oidc-client-secret-file, --oidc-role and --oidc-redirect-url configure an OpenID login: give --oidc-issuer too")
		}
		return webauth.OIDCConfig{}, nil
	}
	roles, def, err := webauth.ParseOIDCRoles(o.roles, o.defaultRole)
	if err != nil {
		return webauth.OIDCConfig{}, err
	}
	if o.secretFile == "" {
		return webauth.OIDCConfig{}, errors.New("--oidc-issuer needs --oidc-client-secret-file: a file holding the client's secret")
	}
	b, err := os.ReadFile(o.secretFile)
	if err != nil {
		return webauth.OIDCConfig{}, fmt.Errorf("--oidc-client-secret-file: %w", err)
	}
	secret, _, _ := strings.Cut(string(b), "\n")
	if secret = strings.TrimSpace(secret); secret == "" {
		return webauth.OIDCConfig{}, fmt.Errorf("--oidc-client-secret-file %s is empty: put the client's secret on its first line", o.secretFile)
	}
	return webauth.OIDCConfig{Issuer: o.issuer, ClientID: o.clientID, ClientSecret: secret, RedirectURL: o.redirectURL,
		GroupsClaim: o.groupsClaim, Roles: roles, DefaultRole: def, Scopes: o.scopes}, nil
}

func serveCmd(g *globals) *cobra.Command {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the functions directory (with an embedded NATS server unless --nats is given)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := newLogger(g.logLevel)
			if err != nil {
				return err
			}
			defer log.Sync()
			if f.cfg.Deployed && cmd.Flags().Changed("functions") {
				return errors.New("--deployed serves the current deployment (host deploy), --functions a directory: give one of them (remove functions from the config file to serve deployments)")
			}
			if err := chooseNATS(g, f, cmd.Flags().Changed("nats"), cmd.Flags().Changed("nats-listen"), log); err != nil {
				return err
			}
			return serve(cmd.Context(), g, f, log)
		},
		PreRunE: loadConfigFile,
	}
	fl := cmd.Flags()
	addConfigFlag(fl)
	fl.StringVar(&f.cfg.FunctionsDir, "functions", "./functions", "directory of functions")
	fl.BoolVar(&f.cfg.Deployed, "deployed", false, "serve the current deployment stored with `host deploy` instead of --functions, and switch to each new one")
	fl.StringVar(&f.cfg.DataDir, "data", "./data", "directory for state (embedded JetStream, job scratch space, snapshots)")
	fl.StringVar(&f.cfg.HostID, "host-id", "", "this host's name in job records and logs (default: the hostname and a random suffix)")
	fl.StringVar(&f.cfg.Workspace, "workspace", app.DefaultWorkspace, "workspace name, fills $workspace in volume names")
	fl.StringVar(&f.httpAddr, "http", "127.0.0.1:8080", "HTTP address for /healthz, /metrics, /hooks, /run, /mcp and the dashboard; a non-loopback one needs --http-token-file")
	fl.BoolVar(&f.cfg.MCPAll, "mcp-all", false, "offer every function as an MCP tool on /mcp, not only those whose script says tool:")
	fl.StringVar(&f.cfg.ApprovalURL, "public-url", "", "where people reach this host's HTTP (https://host.example.com), for the signed approval links announced on agent.approval.<fn> (default: http://<--http>)")
	fl.StringVar(&f.cfg.OTLPEndpoint, "otlp-endpoint", "", "send a trace of every flow (a span per job and its steps) to this OTLP/HTTP endpoint (http://127.0.0.1:4318); the OTEL_EXPORTER_OTLP_* variables work too; off when neither is set")
	fl.StringVar(&f.cfg.TraceURL, "trace-url", "", "link each job and flow page of the dashboard to its trace: a URL with {trace_id} (http://jaeger:16686/trace/{trace_id})")
	fl.StringVar(&f.httpToken, "http-token-file", "", "file holding the bearer token that the dashboard, its API and POST /run require (Authorization: Bearer, or a login session), created (0600) if missing; without it a loopback --http uses ~/.config/host/http.token, and any other --http is refused")
	fl.StringVar(&f.natsListen, "nats-listen", "127.0.0.1:4222", "client address of the embedded NATS server; a non-loopback one needs --nats-auth or a --nats-config with users (an explicit --nats-listen wins over $NATS_URL)")
	fl.StringVar(&f.mqttListen, "mqtt-listen", "", "serve MQTT (3.1.1) on this address through the embedded NATS server's own MQTT gateway: a publish to sensors/room1/temp is the NATS subject sensors.room1.temp (on: sensors.>); devices log in as NATS users (host users add <name> --nats --topics ...); a non-loopback one needs --nats-auth")
	fl.StringVar(&f.cfg.S3EventsSubject, "s3-events-subject", s3events.DefaultSubject, "NATS subject S3 servers publish their bucket notifications to (AWS S3 event format), for the functions with on: s3:<bucket>[/<prefix>]")
	fl.StringVar(&f.natsConfig, "nats-config", "", "start the embedded NATS server from this nats-server configuration file")
	fl.BoolVar(&f.natsAuth, "nats-auth", false, "require authorization on the embedded NATS server: generate users hosts and callers (<data>/nats-auth.json, mode 0600) and write the NATS CLI contexts host and host-callers")
	fl.DurationVar(&f.natsSync, "nats-sync", 0, "embedded JetStream fsync interval; 0 syncs every write before acknowledging it")
	fl.StringVar(&g.creds, "nats-creds", g.creds, "NATS credentials file (same as --creds)")
	fl.DurationVar(&f.cfg.AckWait, "ack-wait", host.DefaultAckWait, "how long a silent job keeps its message before another host may take it")
	fl.IntVar(&f.cfg.Concurrency, "concurrency", 0, "default runs at once per function (default: number of CPUs)")
	fl.DurationVar(&f.cfg.DefaultTimeout, "default-timeout", runner.DefaultTimeout, "timeout of functions without a timeout: annotation")
	fl.DurationVar(&f.drainTimeout, "drain-timeout", 30*time.Second, "on SIGTERM, how long running jobs may finish before they are handed back")
	fl.Int64Var(&f.cfg.MaxLogBytes, "max-output-bytes", runner.DefaultMaxLogBytes, "output bytes published per job; the rest is dropped and counted")
	fl.StringArrayVar(&f.hooks, "hook", nil, "declare a webhook source: <source>=hmac:<secret>, <source>=bearer:<secret> or <source>=open (repeatable)")
	fl.Int64Var(&f.cfg.HookMaxBytes, "hook-max-bytes", hooks.DefaultMaxBytes, "largest webhook body accepted (larger gets 413)")
	fl.Int64Var(&f.cfg.RunMaxBytes, "run-max-bytes", web.DefaultRunMaxBytes, "largest body accepted to run a function: POST /run, the dashboard's run form, /mcp (larger gets 413); a payload also fits the NATS server's max_payload")
	fl.DurationVar(&f.cfg.HookBodyTimeout, "hook-body-timeout", hooks.DefaultBodyTimeout, "time a webhook body may take to arrive (slower gets 408)")
	fl.IntVar(&f.cfg.HookMaxConcurrent, "hook-max-concurrent", hooks.DefaultMaxConcurrent, "webhook deliveries read at once (more get 503 with Retry-After)")
	fl.StringVar(&f.cfg.Postgres.DSN, "postgres", "", "Postgres database whose tables functions follow with on: postgres:<table> (postgres://user@host:5432/db; the password from $PGPASSWORD or ~/.pgpass rather than here): its changes, read by logical replication, start them; its role needs REPLICATION and must own the tables")
	fl.StringVar(&f.cfg.Postgres.Slot, "postgres-slot", pgsource.DefaultSlot, "name of the replication slot and the publication --postgres makes and reads from; hosts sharing one NATS and database share it (one of them holds the slot at a time)")
	fl.IntVar(&f.cfg.Streams.Replicas, "replicas", 0, "JetStream replicas for the host's streams and buckets: 3 on a cluster; 0 keeps what exists (1 for new ones)")
	fl.StringArrayVar(&f.storeLimits, "store-limit", nil, "limit one of the host's stores: <store>=<size>[,<age>], a stream (AGENT_RUN, AGENT_RESULTS, AGENT_LOGS, AGENT_DEAD; age: how long it keeps a message), a KV bucket or an object store (agent_jobs, agent_volumes, ...), size 512Mi, 4Gi or -1 for none (repeatable)")
	fl.Int64Var(&f.cfg.Streams.MaxPerSubject, "queue-per-subject", 0, "most triggers waiting on any one subject of AGENT_RUN (agent.run.<fn>, a webhook's, an on: subject): past it a publish is refused (\"maximum messages per subject exceeded\"), a raw `nats pub` included, so that one flooded function cannot fill the stream; 0 keeps what the stream has, -1 removes the cap; a function's queue: annotation sets its own, lower, limit")
	fl.IntVar(&f.cfg.MaxHops, "max-hops", host.DefaultMaxHops, "most steps a flow may take before it is stopped as a runaway loop")
	fl.IntVar(&f.cfg.FlowMaxJobs, "flow-max-jobs", host.DefaultFlowMaxJobs, "most jobs one flow may start through its next: steps, every item of a map one, nested maps multiplied, counted across hosts; a step that would start more fails with an error event and a dead letter naming this limit (-1: no bound)")
	fl.IntVar(&f.cfg.MaxToolDepth, "tool-depth", host.DefaultMaxToolDepth, "most deeply tool calls (tools:) may nest: a call past it fails for good")
	fl.StringVar(&f.secretsKey, "secrets-key-file", defaultKeyFile(), "host key that encrypts secrets (created if missing); keep it away from --data")
	fl.StringVar(&f.cfg.Packages.PipIndexURL, "pip-index-url", "", "Python package index for requirements.txt (\"none\": only --pip-find-links)")
	fl.StringArrayVar(&f.cfg.Packages.PipFindLinks, "pip-find-links", nil, "extra wheel location for requirements.txt (repeatable)")
	fl.StringVar(&f.cfg.Packages.NpmRegistry, "npm-registry", "", "npm registry for TS/JS imports (default: Bun's)")
	f.s3.register(fl)
	f.oidc.register(fl)
	fl.Int64Var(&f.cfg.Volumes.CacheBytes, "volume-cache-bytes", 1<<30, "local cache of volume files, least recently used evicted")
	fl.Int64Var(&f.cfg.Volumes.MaxBytes, "volume-max-bytes", 1<<30, "largest a volume may grow; a run over it fails and commits nothing")
	fl.IntVar(&f.cfg.Volumes.MaxFiles, "volume-max-files", 100_000, "most files a volume may hold")
	fl.IntVar(&f.cfg.Volumes.KeepVersions, "volume-versions", 10, "versions kept per volume")
	fl.StringArrayVar(&f.cfg.EgressCAFiles, "egress-ca-file", nil, "PEM file of roots the egress proxy trusts, besides the system's, for the upstreams whose TLS it terminates (sealed secrets, egress: rules): a private upstream's CA (repeatable)")
	fl.StringArrayVar(&f.resolve, "egress-resolve", nil, "<host>=<ip>:<port>: the egress proxy connects to that address for host, as curl's --resolve; the only way jobs reach a loopback or private upstream by name (repeatable)")
	fl.StringArrayVar(&f.permit, "egress-permit", nil, "private address range (CIDR) the egress proxy may reach all the same, e.g. an internal API gateway (repeatable)")
	fl.StringSliceVar(&f.cfg.AllowNetworkHost, "allow-network-host", nil, "functions (comma separated, or * for all) allowed to use `network: host`, which reaches everything the host can, its NATS included; others are refused")
	fl.StringVar(&f.cfg.Jail, "jail", "bwrap", "jail tool for sandbox functions: bwrap or nsjail")
	fl.IntVar(&f.cfg.Limits.Pids, "job-pids", sandbox.DefaultPids, "processes and threads a jailed run may have")
	fl.Uint64Var(&f.cfg.Limits.OpenFiles, "job-open-files", sandbox.DefaultOpenFiles, "open files per process of a jailed run")
	fl.Int64Var(&f.cfg.Limits.TmpSize, "job-tmp-size", sandbox.DefaultTmpSize, "size in bytes of a jailed run's /tmp")
	fl.Int64Var(&f.jobDisk, "job-disk", runner.DefaultJobDisk, "size in bytes of a jailed run's /job, its volumes included: a tmpfs of that size (its pages count against the job's memory), so a job that fills it gets ENOSPC and the host's disk is untouched; a disk: annotation overrides it (0: no bound, /job on the --data disk)")
	fl.Int64Var(&f.cfg.Limits.FileSize, "job-file-size", 0, "largest file a jailed run may write, in bytes (0: no limit)")
	fl.DurationVar(&f.cfg.Limits.CPUTime, "job-cpu-time", 0, "CPU time per process of a jailed run (0: bounded by its timeout only)")
	fl.IntVar(&f.cfg.JailUID, "jail-uid", sandbox.DefaultUID, "host uid the jail runs as when the host runs as root")
	fl.IntVar(&f.cfg.JailGID, "jail-gid", sandbox.DefaultGID, "host gid the jail runs as when the host runs as root")
	fl.IntVar(&f.warm, "warm", runner.DefaultWarm, "jails kept started and waiting for each sandboxed function without a warm: annotation; each serves one job (0: none, every job starts its jail)")
	fl.IntVar(&f.cfg.WarmMax, "warm-max", runner.DefaultWarmMax, "most warm jails on this host, all functions together")
	fl.BoolVar(&f.cfg.Fork, "fork", false, "serve each job of a sandboxed Python function as a fork of a template jail of its function (new namespaces, cgroup, filter per job) instead of a warm or cold jail; functions it cannot serve run as before, and the log says why")
	fl.Int64Var(&f.cfg.WarmMaxMemory, "warm-max-memory", runner.DefaultWarmMaxMemory, "most memory in bytes the warm jails of this host reserve, each its function's memory: limit (or 64 MiB without one)")
	return cmd
}

// serve turns the flags into the composition root's config and runs it until a signal.
func serve(ctx context.Context, g *globals, f *serveFlags, log *zap.Logger) error {
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := f.configure(log); err != nil {
		return err
	}
	run := app.ServeConfig{Config: f.cfg, HTTPAddr: f.httpAddr, DrainTimeout: f.drainTimeout,
		Connect: bus.ConnectOptions{URL: g.natsURL, Creds: g.creds, User: g.user, Password: g.password, Name: "host", MaxWait: 2 * time.Minute}}
	if g.natsURL != "" && f.mqttListen != "" {
		return errors.New("--mqtt-listen starts MQTT on the embedded NATS server, but --nats joins an existing one: put an mqtt { listen: ... } block (and a server_name) in that server's configuration instead")
	}
	if !bus.ValidSubject(f.cfg.S3EventsSubject) || strings.ContainsAny(f.cfg.S3EventsSubject, "*>") {
		return fmt.Errorf("--s3-events-subject %q: want one NATS subject without wildcards, e.g. s3.events", f.cfg.S3EventsSubject)
	}
	if g.natsURL == "" {
		run.Embedded = &bus.ServerConfig{Listen: f.natsListen, ConfigFile: f.natsConfig, SyncInterval: f.natsSync, MQTTListen: f.mqttListen}
		run.EmbeddedAuth = f.natsAuth
	}
	return app.Run(ctx, run, log)
}

// configure checks the flags that serve reads beyond their parsing and puts them into f.cfg.
func (f *serveFlags) configure(log *zap.Logger) error {
	switch {
	case f.warm < 0 || f.warm > annot.MaxWarm:
		return fmt.Errorf("--warm %d: want a number of jails from 0 (none) to %d", f.warm, annot.MaxWarm)
	case f.warm == 0:
		f.cfg.Warm = -1 // wire's zero value is the default, not none
	default:
		f.cfg.Warm = f.warm
	}
	switch {
	case f.jobDisk < 0:
		return fmt.Errorf("--job-disk %d: want a size in bytes, or 0 for no bound", f.jobDisk)
	case f.jobDisk == 0:
		f.cfg.JobDisk = -1 // wire's zero value is the default, not none
	default:
		f.cfg.JobDisk = f.jobDisk
	}
	if f.cfg.WarmMax < 0 || f.cfg.WarmMaxMemory < 0 {
		return fmt.Errorf("--warm-max %d, --warm-max-memory %d: want positive caps", f.cfg.WarmMax, f.cfg.WarmMaxMemory)
	}
	for _, spec := range f.storeLimits {
		name, l, err := host.ParseStoreLimit(spec)
		if err != nil {
			return err
		}
		if f.cfg.Streams.Limits == nil {
			f.cfg.Streams.Limits = map[string]bus.StoreLimit{}
		}
		f.cfg.Streams.Limits[name] = l
	}
	for _, p := range f.permit {
		prefix, err := netip.ParsePrefix(p)
		if err != nil {
			return fmt.Errorf("--egress-permit %q: want a CIDR such as 10.1.2.0/24: %w", p, err)
		}
		f.cfg.EgressPermit = append(f.cfg.EgressPermit, prefix)
	}
	pins, err := parseResolve(f.resolve)
	if err != nil {
		return err
	}
	f.cfg.EgressResolve = pins
	for _, spec := range f.hooks {
		src, err := hooks.ParseSource(spec)
		if err != nil {
			return err
		}
		f.cfg.Hooks = append(f.cfg.Hooks, src)
	}
	key, err := secrets.LoadKey(f.secretsKey, true)
	if err != nil {
		return fmt.Errorf("secrets key: %w", err)
	}
	f.cfg.SecretsKey = key
	if f.cfg.S3, err = f.s3.config(); err != nil {
		return err
	}
	if f.cfg.Web, err = webConfig(f.httpAddr, f.httpToken, log); err != nil {
		return err
	}
	if f.cfg.OIDC, err = f.oidc.config(); err != nil {
		return err
	}
	return nil
}

// chooseNATS settles which NATS serve uses when the flags and $NATS_URL disagree. An explicit
// --nats-listen, --nats-config or --nats-auth configures the embedded server, which is what its
// user asked for: a $NATS_URL exported for the CLI commands is ignored, and the log says so.
// --nats given on the command line together with them is refused, as nothing says which wins.
func chooseNATS(g *globals, f *serveFlags, natsFlagSet, listenSet bool, log *zap.Logger) error {
	var embedded []string
	if listenSet {
		embedded = append(embedded, "--nats-listen")
	}
	if f.natsConfig != "" {
		embedded = append(embedded, "--nats-config")
	}
	if f.natsAuth {
		embedded = append(embedded, "--nats-auth")
	}
	switch {
	case g.natsURL == "":
		return nil
	case len(embedded) > 0 && natsFlagSet:
		verb := "configures"
		if len(embedded) > 1 {
			verb = "configure"
		}
		return fmt.Errorf("--nats joins an existing NATS server, but %s %s the embedded one: pass one or the other (with --nats, give the host's credentials with --creds or --user/--password)", strings.Join(embedded, " and "), verb)
	case len(embedded) > 0:
		log.Warn("$NATS_URL is ignored: "+strings.Join(embedded, " and ")+" asks for the embedded NATS server; unset NATS_URL, or pass --nats to join that server instead",
			zap.String("NATS_URL", redactURL(g.natsURL)))
		g.natsURL = ""
		return nil
	}
	from := "$NATS_URL"
	if natsFlagSet {
		from = "--nats"
	}
	log.Info("joining an existing NATS server; no embedded server is started", zap.String("nats", redactURL(g.natsURL)), zap.String("from", from))
	return nil
}

// redactURL hides passwords in NATS URLs before they are logged.
func redactURL(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			parts[i] = u.Redacted()
		}
	}
	return strings.Join(parts, ",")
}

// webConfig settles the web face's guard: the token of --http-token-file or, on a loopback
// --http without one, of defaultTokenFile(); either file is made at first start. Anyone who
// reaches the dashboard or POST /run can run every function and read every job, and on
// loopback that is every local account; the file (0600) is readable by the host's own user
// only. A non-loopback --http needs a token file named on purpose.
func webConfig(addr, tokenFile string, log *zap.Logger) (webauth.Config, error) {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return webauth.Config{}, fmt.Errorf("--http %q: want host:port: %w", addr, err)
	}
	cfg := webauth.Config{Loopback: bus.IsLoopback(h)}
	path := tokenFile
	switch {
	case path == "" && !cfg.Loopback:
		return cfg, fmt.Errorf("refusing --http %s without --http-token-file: the dashboard and POST /run/<name> would let anyone who reaches it run every function; "+
			"give a token (`openssl rand -hex 32 > http.token`, then --http-token-file http.token), or serve on a loopback address such as --http 127.0.0.1:8080 "+
			"and, to take webhooks from outside, put a reverse proxy on the public address that forwards only /hooks/ to it", addr)
	case path == "":
		if path = defaultTokenFile(); path == "" {
			return cfg, errors.New("no home directory for the web token ($XDG_CONFIG_HOME and $HOME are unset): pass --http-token-file")
		}
	}
	token, created, err := webauth.LoadOrCreateTokenFile(path)
	if err != nil {
		return cfg, err
	}
	cfg.Token, cfg.TokenFile = token, path
	// Where the token is, never the token: logs are read by more people than the file.
	msg := "the dashboard and POST /run need the web token in " + path + ": send `Authorization: Bearer $(cat " + path + ")`, or log in at /login with it"
	if created {
		msg = "made a web token (mode 0600: this user only); " + msg
	}
	log.Info(msg, zap.String("http_token_file", path), zap.Bool("created", created))
	return cfg, nil
}

// defaultTokenFile is where serve keeps the web token without --http-token-file: beside the
// secrets key, in the user's config directory ($XDG_CONFIG_HOME, else $HOME/.config).
func defaultTokenFile() string {
	dir, err := os.UserConfigDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, "host", "http.token")
}

// parseResolve reads --egress-resolve values, <host>=<ip>:<port>.
func parseResolve(specs []string) (map[string]netip.AddrPort, error) {
	out := map[string]netip.AddrPort{}
	for _, spec := range specs {
		host, addr, ok := strings.Cut(spec, "=")
		host = strings.ToLower(strings.TrimSuffix(strings.TrimSpace(host), "."))
		ap, err := netip.ParseAddrPort(strings.TrimSpace(addr))
		switch {
		case !ok || host == "":
			return nil, fmt.Errorf("--egress-resolve %q: want <host>=<ip>:<port>, e.g. api.anthropic.com=127.0.0.1:8443", spec)
		case err != nil || ap.Port() == 0:
			return nil, fmt.Errorf("--egress-resolve %q: %q is not <ip>:<port> (IPv6 as [::1]:8443)", spec, addr)
		case strings.ContainsAny(host, ":/ "):
			return nil, fmt.Errorf("--egress-resolve %q: %q is not a host name", spec, host)
		}
		if _, dup := out[host]; dup {
			return nil, fmt.Errorf("--egress-resolve: %s is pinned twice", host)
		}
		out[host] = ap
	}
	return out, nil
}
