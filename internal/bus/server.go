package bus

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"go.uber.org/zap"
)

// ServerConfig describes the embedded nats-server.
type ServerConfig struct {
	// Listen is host:port for clients; port -1 picks a free one (tests).
	Listen string
	// StoreDir is JetStream's directory.
	StoreDir string
	// ConfigFile, when set, is a nats-server configuration that replaces Listen and StoreDir
	// unless it leaves them unset.
	ConfigFile string
	// SyncInterval is how often JetStream fsyncs; 0 means "always": every write reaches the disk
	// before it is acknowledged, which is what a single node needs not to lose acknowledged
	// messages on power loss.
	SyncInterval time.Duration
	// Auth, when set, adds the generated users of `serve --nats-auth` (hosts and callers).
	Auth *Auth
	// MaxStore is JetStream's max_file_store in bytes; 0 leaves it to the configuration file,
	// else to the server, which takes 75% of the free space of the store's disk.
	MaxStore int64
	// MQTTListen, when set, is host:port of nats-server's own MQTT gateway (serve
	// --mqtt-listen): an MQTT publish to a/b/c is the NATS subject a.b.c. MQTT clients log in
	// as the server's users, with their permissions.
	MQTTListen string
}

// StartServer starts an embedded nats-server with JetStream and waits until it takes clients.
func StartServer(cfg ServerConfig, log *zap.Logger) (*server.Server, error) {
	e, err := StartEmbedded(cfg, log)
	if err != nil {
		return nil, err
	}
	return e.Server, nil
}

// StartEmbedded is StartServer, keeping what it needs to change the server's users later
// (Embedded.SetUsers).
func StartEmbedded(cfg ServerConfig, log *zap.Logger) (*Embedded, error) {
	opts := &server.Options{}
	if cfg.ConfigFile != "" {
		var err error
		opts, err = server.ProcessConfigFile(cfg.ConfigFile)
		if err != nil {
			return nil, fmt.Errorf("read nats config %s: %w", cfg.ConfigFile, err)
		}
	}
	if cfg.ConfigFile == "" || (opts.Host == "" && opts.Port == 0) {
		host, port, err := splitHostPort(cfg.Listen)
		if err != nil {
			return nil, err
		}
		opts.Host, opts.Port = host, port
	}
	opts.JetStream = true
	if err := mqttOptions(opts, cfg.MQTTListen); err != nil {
		return nil, err
	}
	if cfg.MaxStore > 0 {
		opts.JetStreamMaxStore = cfg.MaxStore
	}
	if opts.StoreDir == "" {
		opts.StoreDir = cfg.StoreDir
	}
	if cfg.ConfigFile == "" {
		if cfg.SyncInterval <= 0 {
			opts.SyncAlways = true
		} else {
			opts.SyncInterval = cfg.SyncInterval
		}
	}
	if cfg.Auth != nil {
		if hasAuthorization(opts) {
			return nil, fmt.Errorf("--nats-auth and the authorization in %s do not mix: use one or the other", cfg.ConfigFile)
		}
		opts.Users = append(opts.Users, cfg.Auth.Users()...)
	}
	// Protected mode: the server holds the job records, the secrets bucket's envelopes and every
	// volume, so it answers anonymous connections from this machine only.
	if open := openListeners(opts); len(open) > 0 {
		return nil, fmt.Errorf("refusing to serve NATS %s without authorization: anyone who reaches it would get the whole JetStream API, job records, secrets and volumes included; "+
			"listen on a loopback address (--nats-listen 127.0.0.1:4222), or require authorization with --nats-auth (generated users for hosts and callers) "+
			"or with --nats-config and a configuration that has users or accounts (see examples/nats-auth.conf; cluster routes and gateways need their own authorization or mutual TLS)", strings.Join(open, " and "))
	}
	if opts.NoAuthUser != "" && !IsLoopback(opts.Host) {
		log.Warn("no_auth_user lets clients without credentials in as that user on a non-loopback address", zap.String("no_auth_user", opts.NoAuthUser))
	}
	opts.NoSigs = true // the host owns signal handling and shuts the server down itself
	// The server owns opts from here on (and changes them); a reload starts from this copy.
	base := opts.Clone()
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("create embedded nats-server: %w", err)
	}
	s.SetLoggerV2(&serverLogger{s: log.Named("nats").Sugar()}, false, false, false)
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats-server on %s did not become ready in 30s; is the port taken? pick another with --nats-listen", cfg.Listen)
	}
	return &Embedded{Server: s, base: base, auth: cfg.Auth, log: log}, nil
}

// mqttOptions turns the MQTT gateway on at listen ("" leaves the configuration file's). The
// gateway keeps its sessions and QoS 1 and 2 messages in JetStream, which needs the server to
// have a name: the configuration's, else one that stays the same from one start to the next.
func mqttOptions(opts *server.Options, listen string) error {
	if listen != "" {
		host, port, err := splitHostPort(listen)
		if err != nil {
			return fmt.Errorf("--mqtt-listen: %w", err)
		}
		opts.MQTT.Host, opts.MQTT.Port = host, port
	}
	if opts.MQTT.Port != 0 && opts.ServerName == "" {
		name, _ := os.Hostname()
		opts.ServerName = "host-" + name
	}
	return nil
}

func splitHostPort(listen string) (string, int, error) {
	host, p, err := net.SplitHostPort(listen)
	if err != nil {
		return "", 0, fmt.Errorf("parse listen address %q (want host:port): %w", listen, err)
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < -1 || port > 65535 {
		return "", 0, fmt.Errorf("parse listen address %q: bad port %q", listen, p)
	}
	return host, port, nil
}

// serverLogger routes nats-server's log lines into zap. The startup banner (about 20 notices
// between "Starting nats-server" and "Server is ready", ASCII art included) becomes one line
// with the facts an operator looks for; the banner's other lines go to debug.
type serverLogger struct {
	s *zap.SugaredLogger

	mu       sync.Mutex
	inBanner bool
	banner   []any // zap key-value pairs gathered so far
}

// bannerFields are the banner lines kept, by their label, and the field each becomes.
var bannerFields = map[string]string{
	"Version":         "version",
	"Name":            "name",
	"Store Directory": "jetstream_dir",
	"Max Memory":      "jetstream_max_memory",
	"Max Storage":     "jetstream_max_storage",
}

func (l *serverLogger) Noticef(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case strings.HasPrefix(msg, "Starting nats-server"):
		l.inBanner, l.banner = true, nil
	case !l.inBanner:
		l.s.Info(msg)
	case msg == "Server is ready":
		l.inBanner = false
		l.s.Infow("nats-server ready", l.banner...)
	default:
		if addr, ok := strings.CutPrefix(msg, "Listening for client connections on "); ok {
			l.banner = append(l.banner, "listen", addr)
			return
		}
		if addr, ok := strings.CutPrefix(msg, "Listening for MQTT clients on "); ok {
			l.banner = append(l.banner, "mqtt", addr)
			return
		}
		if label, value, ok := strings.Cut(strings.TrimSpace(msg), ":"); ok {
			if key, kept := bannerFields[label]; kept {
				l.banner = append(l.banner, key, strings.Trim(strings.TrimSpace(value), `"`))
				return
			}
		}
		l.s.Debug(msg)
	}
}

func (l *serverLogger) Warnf(format string, v ...any)  { l.s.Warnf(format, v...) }
func (l *serverLogger) Fatalf(format string, v ...any) { l.s.Errorf(format, v...) }
func (l *serverLogger) Errorf(format string, v ...any) { l.s.Errorf(format, v...) }
func (l *serverLogger) Debugf(format string, v ...any) { l.s.Debugf(format, v...) }
func (l *serverLogger) Tracef(format string, v ...any) { l.s.Debugf(format, v...) }
