package main

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/BurntSushi/toml"
	"github.com/hbollon/go-edlib"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// configFlag names the file serve reads its settings from.
const configFlag = "config"

// addConfigFlag registers --config on a command whose PreRunE is loadConfigFile.
func addConfigFlag(fs *pflag.FlagSet) {
	fs.String(configFlag, "", "read settings from this TOML file: each key is a flag's name (default-timeout = \"15m\", hook = [\"a=open\"]); flags on the command line win")
}

// loadConfigFile applies the --config file, if one is given, to the command's flags.
//
// There is no second parser and no second set of names: a key is a flag's name, and its value
// goes through that flag's own pflag.Value.Set, exactly as if it had been typed on the command
// line (an array is one Set per element, as a repeated flag is). So every flag has a key, a
// new flag gets one without anyone remembering to add it, and a value means in the file what it
// means on the command line. Flags given on the command line are left alone: they override the
// file. A value from the file counts as given (Changed), as its flag would: the file is
// explicit configuration, so it also wins over a default taken from the environment ($NATS_URL
// for nats).
func loadConfigFile(cmd *cobra.Command, _ []string) error {
	path, err := cmd.Flags().GetString(configFlag)
	if err != nil || path == "" {
		return err
	}
	return applyConfigFile(cmd.Flags(), path)
}

func applyConfigFile(flags *pflag.FlagSet, path string) error {
	var settings map[string]any
	if _, err := toml.DecodeFile(path, &settings); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("--config %s: %w (give the path of an existing TOML file; packaging/host.toml is an example)", path, err)
		}
		return fmt.Errorf("--config %s: not valid TOML: %w", path, err)
	}
	keys := make([]string, 0, len(settings))
	for k := range settings {
		keys = append(keys, k)
	}
	// Sorted, so that a file with several mistakes reports the same one every time.
	slices.Sort(keys)
	for _, key := range keys {
		f := flags.Lookup(key)
		if f == nil || key == configFlag || key == "help" {
			return fmt.Errorf("%s: unknown key %q: keys are the flag names of `host serve`; did you mean %q?", path, key, nearestFlag(flags, key))
		}
		if f.Changed {
			continue
		}
		values, err := configValues(settings[key], isMultiValued(f))
		if err != nil {
			return fmt.Errorf("%s: key %q: %w", path, key, err)
		}
		for _, v := range values {
			if err := flags.Set(key, v); err != nil {
				// pflag's error names the value and the flag, as on the command line.
				return fmt.Errorf("%s: key %q: %w", path, key, err)
			}
		}
	}
	return nil
}

// isMultiValued reports whether a flag may be given more than once to collect values
// (--hook, --pip-find-links, --allow-network-host).
func isMultiValued(f *pflag.Flag) bool {
	_, ok := f.Value.(pflag.SliceValue)
	return ok
}

// configValues turns a TOML value into the strings its flag's Set takes: one for a scalar,
// one per element of an array, for flags that take several.
func configValues(v any, multi bool) ([]string, error) {
	if arr, ok := v.([]any); ok {
		if !multi {
			return nil, fmt.Errorf("an array, but this flag takes a single value: write it without [ ]")
		}
		out := make([]string, 0, len(arr))
		for i, e := range arr {
			s, err := scalarString(e)
			if err != nil {
				return nil, fmt.Errorf("element %d: %w", i, err)
			}
			out = append(out, s)
		}
		return out, nil
	}
	s, err := scalarString(v)
	if err != nil {
		return nil, err
	}
	return []string{s}, nil
}

// scalarString writes a TOML scalar as it would be typed after its flag.
func scalarString(v any) (string, error) {
	switch v := v.(type) {
	case string:
		return v, nil
	case bool:
		return strconv.FormatBool(v), nil
	case int64:
		return strconv.FormatInt(v, 10), nil
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), nil
	case map[string]any:
		return "", fmt.Errorf("a table, but flags take a string, number or boolean (or an array of them): keys are flag names at the top level, with no [sections]")
	case []any:
		return "", fmt.Errorf("a nested array, but flags take a string, number or boolean")
	default:
		return "", fmt.Errorf("a %T; write it as a string, the way it is given to the flag", v)
	}
}

// nearestFlag is the flag name closest to key: the same name with dashes for underscores (the
// usual slip in a config file), else the least edit distance.
func nearestFlag(flags *pflag.FlagSet, key string) string {
	if dashed := strings.ReplaceAll(key, "_", "-"); dashed != key && flags.Lookup(dashed) != nil {
		return dashed
	}
	best, bestDist := "", -1
	flags.VisitAll(func(f *pflag.Flag) {
		if f.Name == configFlag || f.Name == "help" {
			return
		}
		// The distance annot's typo check uses, without its cut-off: an unknown key always
		// gets the nearest name, however far.
		if d := edlib.OSADamerauLevenshteinDistance(key, f.Name); bestDist < 0 || d < bestDist {
			best, bestDist = f.Name, d
		}
	})
	return best
}
