package people

import (
	"fmt"
	"strings"
)

// TopicSubject reads one subject a user's NATS login may publish and subscribe to beyond
// its role (host users add --topics): a NATS subject (sensors.>) or an MQTT topic filter
// (sensors/#, sensors/+/temp), which nats-server's MQTT gateway maps onto the same subject.
// What the hosts keep for themselves is refused: agent.>, webhook.>, $... and _INBOX...,
// and a first token that is a wildcard, which would cover them.
func TopicSubject(topic string) (string, error) {
	s := strings.TrimSpace(topic)
	if strings.ContainsAny(s, "/#+") {
		if strings.Contains(s, ".") {
			return "", fmt.Errorf("topic %q mixes MQTT '/' and NATS '.': write sensors/room1/# or sensors.room1.>", topic)
		}
		s = strings.NewReplacer("/", ".", "+", "*", "#", ">").Replace(s)
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		if t == "" || strings.ContainsAny(t, " \t\r\n") || (t != "*" && t != ">" && strings.ContainsAny(t, "*>")) || (t == ">" && i != len(toks)-1) {
			return "", fmt.Errorf("topic %q is not a subject: non-empty tokens without spaces, '*' or '+' a whole token, '>' or '#' the last", topic)
		}
	}
	switch first := toks[0]; {
	case first == "*" || first == ">":
		return "", fmt.Errorf("topic %q starts with a wildcard, which would cover the hosts' own subjects: name its first level (sensors/#)", topic)
	case first == "agent" || first == "webhook" || strings.HasPrefix(first, "$") || strings.HasPrefix(first, "_INBOX"):
		return "", fmt.Errorf("topic %q is under %s, which the hosts keep for themselves (a login runs functions through its role and --functions)", topic, first)
	}
	return s, nil
}
