"""ssh of the two-node harness: a key pair and host keys made for the run, each node's
sshd_config, the client's own config and known_hosts (``ssh -F RUN/ssh/ssh_config``).

Root may log in by the run's key only (no password, no keyboard-interactive, no PAM);
the client trusts exactly the run's host keys (``StrictHostKeyChecking yes`` against
``RUN/ssh/known_hosts``), never reads an agent or ``~/.ssh``, and refuses every host
but the two nodes. Keep-alives both ways (``ServerAliveInterval`` / ``ClientAliveInterval``,
3 missed): a partitioned session ends instead of hanging on.
"""
from __future__ import annotations

import os
import shutil
from typing import Callable, Sequence

from procs import sh


def write_keys_and_configs(root: str, nodes: Sequence[str], address: Callable[[str], str],
                           netns_name: Callable[[str], str], alive_s: int) -> None:
    ssh_dir = os.path.join(root, "ssh")
    os.makedirs(ssh_dir, mode=0o700)
    key = os.path.join(ssh_dir, "id_ed25519")
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ysgdc-run", "-f", key)
    shutil.copy(key + ".pub", os.path.join(ssh_dir, "authorized_keys"))
    known = []
    for node in nodes:
        d = os.path.join(root, node)
        os.makedirs(d)
        hk = os.path.join(d, "ssh_host_ed25519_key")
        sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", node, "-f", hk)
        with open(hk + ".pub") as f:
            kind, blob = f.read().split()[:2]
        known.append(f"{node},{address(node)} {kind} {blob}\n")
        with open(os.path.join(d, "sshd_config"), "w") as f:
            f.write(sshd_config(root, node, address(node), netns_name(node), alive_s))
    with open(os.path.join(ssh_dir, "known_hosts"), "w") as f:
        f.writelines(known)
    with open(os.path.join(ssh_dir, "ssh_config"), "w") as f:
        f.write(client_config(root, nodes, address, alive_s))


def client_config(root: str, nodes: Sequence[str], address: Callable[[str], str],
                  alive_s: int) -> str:
    ssh_dir = os.path.join(root, "ssh")
    return f"""# ssh client config of the two-node test cluster (ssh -F this file)
Host {' '.join(nodes)} {' '.join(address(n) for n in nodes)}
  User root
  IdentityFile {os.path.join(ssh_dir, 'id_ed25519')}
  IdentitiesOnly yes
  IdentityAgent none
  ProxyCommand none
  UserKnownHostsFile {os.path.join(ssh_dir, 'known_hosts')}
  GlobalKnownHostsFile /dev/null
  StrictHostKeyChecking yes
  CheckHostIP no
  BatchMode yes
  PasswordAuthentication no
  KbdInteractiveAuthentication no
  ForwardAgent no
  ForwardX11 no
  ConnectTimeout 5
  ServerAliveInterval {max(1, alive_s)}
  ServerAliveCountMax 3
  LogLevel ERROR
Host *
  # nothing else is reachable from here, and nothing else may be tried
  ProxyCommand /bin/false
"""


def sshd_config(root: str, node: str, addr: str, ns: str, alive_s: int) -> str:
    d = os.path.join(root, node)
    return f"""# sshd of {node} (two-node test cluster); started as
# sshd -D -f THIS -o ListenAddress={addr} inside netns {ns}
Port 22
AddressFamily inet
HostKey {d}/ssh_host_ed25519_key
PidFile {d}/sshd.pid
AuthorizedKeysFile {os.path.join(root, 'ssh', 'authorized_keys')}
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitUserEnvironment no
AllowTcpForwarding no
AllowAgentForwarding no
X11Forwarding no
PermitTunnel no
PrintMotd no
PrintLastLog no
UseDNS no
ClientAliveInterval {max(1, alive_s)}
ClientAliveCountMax 3
MaxStartups 64:30:128
LogLevel INFO
"""
