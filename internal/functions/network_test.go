package functions

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRefuseNetworkHost(t *testing.T) {
	dir := t.TempDir()
	for name, src := range map[string]string{
		"x.sh":     "# sandbox\n# network: host\necho 1\n",
		"y.sh":     "# network: host\necho 1\n",
		"plain.sh": "# sandbox\necho 1\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name    string
		allow   []string
		refused []string
	}{
		{"none allowed", nil, []string{"x", "y"}},
		{"one allowed", []string{"y"}, []string{"x"}},
		{"all allowed", []string{"*"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fns, errs := Load(dir)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			errs = RefuseNetworkHost(fns, tc.allow)
			if len(errs) != len(tc.refused) {
				t.Fatalf("refused %v, want %v", errs, tc.refused)
			}
			for i, name := range tc.refused {
				msg := errs[i].Error()
				want := filepath.Join(dir, name+".sh") + ": network: host lets the function reach everything the host can (its NATS included); refused unless the operator starts serve with --allow-network-host " + name
				if msg != want {
					t.Errorf("message:\n got %s\nwant %s", msg, want)
				}
				if _, ok := fns[name]; ok {
					t.Errorf("%s is still loaded", name)
				}
			}
			if _, ok := fns["plain"]; !ok {
				t.Error("plain was dropped")
			}
		})
	}
}
