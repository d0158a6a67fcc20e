package people

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/crypto/bcrypt"
)

// Bucket is the KeyValue bucket the users live in, as one document under one key: a team has
// tens of users, and one document lets the store check a change against all of them at the
// revision it read (no duplicate name, never no admin left) in one compare-and-set.
const (
	Bucket = "agent_users"
	docKey = "users"
)

// MinTokenLen is the shortest login token the store takes: the web token's minimum too.
const MinTokenLen = 16

// NameRE is a user's or a group's name: one NATS subject token (a user's NATS inbox is
// _INBOX_<name>, its decisions agent.admin.approvals.decide.<name>), no dots or wildcards.
var NameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$`)

// User is a stored user. Only hashes of its token are kept: a SHA-256 for the web login (a
// random 256-bit token needs no slow hash) and, for a NATS login, a bcrypt the NATS server
// itself checks.
type User struct {
	Name      string   `json:"name"`
	Role      Role     `json:"role"`
	Groups    []string `json:"groups,omitempty"`
	Functions string   `json:"functions,omitempty"`
	NATS      bool     `json:"nats,omitempty"`
	// Topics are subjects the user's NATS login may publish and subscribe to beyond its role
	// (TopicSubject): an MQTT device's topics, an S3 server's notification subject.
	Topics    []string  `json:"topics,omitempty"`
	TokenHash string    `json:"token_sha256,omitempty"`
	NATSHash  string    `json:"nats_bcrypt,omitempty"`
	Created   time.Time `json:"created"`
	CreatedBy string    `json:"created_by,omitempty"`
	TokenAt   time.Time `json:"token_at,omitzero"`
}

// Principal is what a login as u authenticates.
func (u User) Principal(via string) Principal {
	return Principal{Name: u.Name, User: true, Role: u.Role, Groups: slices.Clone(u.Groups), Functions: u.Functions, Via: via}
}

// Check refuses a user the store must not hold, saying what to change.
func (u User) Check() error {
	if !NameRE.MatchString(u.Name) {
		return fmt.Errorf("user name %q: use letters, digits, _ and -, starting with a letter or digit, at most 64", u.Name)
	}
	if u.Role < Viewer || u.Role > Admin {
		return fmt.Errorf("user %s: unknown role %d: it is one of %s", u.Name, int(u.Role), strings.Join(Roles(), ", "))
	}
	for _, g := range u.Groups {
		if !NameRE.MatchString(g) {
			return fmt.Errorf("user %s: group name %q: use letters, digits, _ and -, at most 64", u.Name, g)
		}
	}
	for _, t := range u.Topics {
		if _, err := TopicSubject(t); err != nil {
			return fmt.Errorf("user %s: --topics: %w", u.Name, err)
		}
	}
	if u.Functions != "" {
		if _, err := path.Match(u.Functions, ""); err != nil {
			return fmt.Errorf("user %s: --functions %q is not a glob: %w", u.Name, u.Functions, err)
		}
	}
	return nil
}

// Errors a change is refused with.
var (
	ErrExists    = errors.New("a user of that name exists")
	ErrNotFound  = errors.New("no such user")
	ErrLastAdmin = errors.New("it would leave no admin")
	ErrBadToken  = errors.New("no user has that token")
)

// Store keeps the users.
type Store struct {
	kv  jetstream.KeyValue
	now func() time.Time
}

// Open opens the users' bucket, creating it on first use with replicas (0: 1, or what the
// bucket has; a host passes its --replicas, so a cluster's users survive a server's loss).
func Open(ctx context.Context, js jetstream.JetStream, replicas int) (*Store, error) {
	kv, err := js.KeyValue(ctx, Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) || err == nil && replicas > 0 {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: Bucket, Description: "the users, their roles, groups and token hashes (host users)", History: 5,
			Storage: jetstream.FileStorage, Replicas: max(replicas, 1),
		})
	}
	if err != nil {
		return nil, fmt.Errorf("open the users' bucket %s: %w", Bucket, err)
	}
	return &Store{kv: kv, now: time.Now}, nil
}

// Users is the document the store holds, at a revision.
type Users struct {
	ByName map[string]User `json:"users"`
	rev    uint64
}

// Sorted lists the users by name.
func (us Users) Sorted() []User {
	out := make([]User, 0, len(us.ByName))
	for _, u := range us.ByName {
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// ByToken finds the user whose web token is token, comparing every hash in constant time.
func (us Users) ByToken(token string) (User, bool) {
	sum := sha256.Sum256([]byte(token))
	h := []byte(hex.EncodeToString(sum[:]))
	var found User
	ok := false
	for _, u := range us.ByName {
		if u.TokenHash != "" && subtle.ConstantTimeCompare(h, []byte(u.TokenHash)) == 1 {
			found, ok = u, true
		}
	}
	return found, ok
}

func (us Users) admins() int {
	n := 0
	for _, u := range us.ByName {
		if u.Role == Admin {
			n++
		}
	}
	return n
}

// Load reads the users as they are.
func (s *Store) Load(ctx context.Context) (Users, error) {
	e, err := s.kv.Get(ctx, docKey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Users{ByName: map[string]User{}}, nil
	}
	if err != nil {
		return Users{}, fmt.Errorf("read the users (%s): %w", Bucket, err)
	}
	return decode(e)
}

func decode(e jetstream.KeyValueEntry) (Users, error) {
	us := Users{rev: e.Revision()}
	if err := json.Unmarshal(e.Value(), &us); err != nil {
		return Users{}, fmt.Errorf("the users' document in %s is not valid (%w): restore it from the bucket's history", Bucket, err)
	}
	if us.ByName == nil {
		us.ByName = map[string]User{}
	}
	return us, nil
}

// change applies fn to the users as stored and writes the result at the revision read; a
// write that lost a race reads again and tries again.
func (s *Store) change(ctx context.Context, fn func(Users) error) (Users, error) {
	for range 10 {
		us, err := s.Load(ctx)
		if err != nil {
			return Users{}, err
		}
		if err := fn(us); err != nil {
			return Users{}, err
		}
		b, _ := json.Marshal(us)
		if us.rev == 0 {
			us.rev, err = s.kv.Create(ctx, docKey, b)
		} else {
			us.rev, err = s.kv.Update(ctx, docKey, b, us.rev)
		}
		if err == nil {
			return us, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSequence(err) {
			return Users{}, fmt.Errorf("write the users (%s): %w", Bucket, err)
		}
	}
	return Users{}, errors.New("the users changed under ten writes in a row; try again")
}

func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// Add stores a new user; it refuses a duplicate name and a user Check refuses.
func (s *Store) Add(ctx context.Context, u User) (User, error) {
	u.Groups = dedupe(u.Groups)
	if err := u.Check(); err != nil {
		return User{}, err
	}
	u.Created = s.now().UTC().Truncate(time.Second)
	_, err := s.change(ctx, func(us Users) error {
		if _, ok := us.ByName[u.Name]; ok {
			return fmt.Errorf("add user %s: %w (change it with `host users rm %s` and add it again)", u.Name, ErrExists, u.Name)
		}
		us.ByName[u.Name] = u
		return nil
	})
	return u, err
}

// Remove removes a user; it refuses to remove the last admin.
func (s *Store) Remove(ctx context.Context, name string) (User, error) {
	var gone User
	_, err := s.change(ctx, func(us Users) error {
		u, ok := us.ByName[name]
		if !ok {
			return fmt.Errorf("remove user %s: %w (`host users ls` lists them)", name, ErrNotFound)
		}
		if u.Role == Admin && us.admins() == 1 {
			return fmt.Errorf("remove user %s: %w: add another admin first (`host users add <name> --role admin`)", name, ErrLastAdmin)
		}
		delete(us.ByName, name)
		gone = u
		return nil
	})
	return gone, err
}

// SetToken gives a user a new login token (token "" makes one: 32 random bytes, hex) and
// returns it; the old one stops working at once. Only hashes are stored.
func (s *Store) SetToken(ctx context.Context, name, token string) (string, error) {
	if token == "" {
		b := make([]byte, 32)
		_, _ = rand.Read(b) // crypto/rand.Read never fails on Linux
		token = hex.EncodeToString(b)
	}
	if len(token) < MinTokenLen {
		return "", fmt.Errorf("user %s: the token has %d characters, want at least %d (or leave it out and one is made)", name, len(token), MinTokenLen)
	}
	sum := sha256.Sum256([]byte(token))
	var natsHash string
	_, err := s.change(ctx, func(us Users) error {
		u, ok := us.ByName[name]
		if !ok {
			return fmt.Errorf("token for user %s: %w (`host users add %s --role <role>` first)", name, ErrNotFound, name)
		}
		if _, taken := us.ByToken(token); taken {
			return errors.New("that token is another user's: use another")
		}
		if u.NATS && natsHash == "" {
			h, err := bcrypt.GenerateFromPassword([]byte(token), bcrypt.DefaultCost)
			if err != nil {
				return fmt.Errorf("hash the NATS password of %s: %w", name, err)
			}
			natsHash = string(h)
		}
		u.TokenHash, u.NATSHash, u.TokenAt = hex.EncodeToString(sum[:]), natsHash, s.now().UTC().Truncate(time.Second)
		us.ByName[name] = u
		return nil
	})
	if err != nil {
		return "", err
	}
	return token, nil
}

// Authenticate finds the user a web token belongs to.
func (s *Store) Authenticate(ctx context.Context, token string) (User, error) {
	us, err := s.Load(ctx)
	if err != nil {
		return User{}, err
	}
	u, ok := us.ByToken(token)
	if !ok {
		return User{}, ErrBadToken
	}
	return u, nil
}

// Watch sends the users each time they change, starting with how they are now, until ctx
// ends. Hosts follow it to reload their NATS users and web logins.
func (s *Store) Watch(ctx context.Context) (<-chan Users, error) {
	w, err := s.kv.Watch(ctx, docKey)
	if err != nil {
		return nil, fmt.Errorf("watch the users (%s): %w", Bucket, err)
	}
	out := make(chan Users, 1)
	go func() {
		defer close(out)
		defer w.Stop()
		sent := false
		for e := range w.Updates() {
			if e == nil && sent {
				continue // the end of the initial values, which were sent
			}
			us := Users{ByName: map[string]User{}}
			if e != nil && e.Operation() == jetstream.KeyValuePut {
				var err error
				if us, err = decode(e); err != nil {
					continue
				}
			}
			select {
			case out <- us:
				sent = true
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

func dedupe(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return slices.Compact(s)
}
