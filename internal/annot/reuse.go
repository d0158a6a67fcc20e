package annot

import "strings"

// reuseSafe refuses `reuse:` where one jail serving many messages could hand one message's
// data to another that must not see it. Each refusal says why, at the reuse: line, and
// what to do instead.
func (p *parser) reuseSafe() {
	line, ok := p.seen["reuse"]
	s := p.spec
	if !ok || s.Reuse == 0 {
		return
	}
	const off = ` (or drop the reuse: line: a fresh jail per message is the default)`
	if !s.Sandbox {
		p.errorf(line, "reuse: keeps a jail between messages, and this function has none: add \"sandbox\""+off)
	}
	if s.Network.Mode == NetworkHost {
		p.errorf(line, "reuse: cannot be made safe with network: host: a message could leave connections and listening sockets in the host's network that outlive it and reach the next message, which the host cannot end between messages as it ends a message's egress proxy; write \"network: proxy [host ...]\" or \"network: none\""+off)
	}
	for _, v := range s.Volumes {
		if strings.Contains(v.Name, "$args") {
			p.errorf(line, "reuse: cannot be made safe with volume %s named from the arguments (line %d): the messages of one jail would check out different callers' volumes, and what one message's code keeps in memory (module state carries over) could reach a caller who may not see it; name the volume without $args[...]"+off, v.Name, v.Line)
		}
	}
	if s.Approve != nil && s.Approve.Stage {
		p.errorf(line, "reuse: cannot be made safe with a staged approve: (line %d): a message's staged volume writes are not approved yet, and module state that carries over could hand them to the next message before a decision; drop \"stage\""+off, s.Approve.Line)
	}
}
