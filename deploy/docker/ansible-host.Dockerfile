# A Debian host for testing deploy/ansible/ (tests/integration/test_ansible.py): systemd as init
# and sshd, like a freshly installed server, with the OS packages the roles declare already
# installed so the test needs no package mirror (the roles' apt tasks find them present).
#
# Run it privileged with a tmpfs on /run and /run/lock (systemd's requirements in a container);
# the test puts its public key into /root/.ssh/authorized_keys through a bind mount or `docker cp`.
ARG BASE_IMAGE=debian:bookworm-slim
FROM ${BASE_IMAGE}
LABEL org.headwater.image=ansible-host

RUN set -eux; \
    mkdir -p /usr/share/man/man1; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
        systemd systemd-sysv dbus openssh-server sudo python3 python3-apt python3-venv \
        openjdk-17-jre-headless libzookeeper-java libslf4j-java procps iproute2; \
    rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/log/apt /var/log/dpkg.log; \
    # Units that make no sense in a container (or would wait for hardware) are masked.
    for unit in getty.target console-getty.service systemd-udevd.service systemd-udev-trigger.service \
        systemd-modules-load.service sys-kernel-config.mount sys-kernel-debug.mount \
        systemd-remount-fs.service systemd-logind.service; do \
        ln -sf /dev/null "/etc/systemd/system/$unit"; \
    done; \
    mkdir -p /root/.ssh /run/sshd; chmod 0700 /root/.ssh; \
    sed -ri 's/^#?PermitRootLogin .*/PermitRootLogin prohibit-password/; s/^#?PasswordAuthentication .*/PasswordAuthentication no/; s/^#?UseDNS .*/UseDNS no/' /etc/ssh/sshd_config; \
    rm -f /etc/ssh/ssh_host_*_key*; \
    systemctl enable ssh.service; \
    : >/etc/machine-id

# Host keys are made at the first start (each container gets its own).
RUN printf '[Unit]\nDescription=SSH host keys\nBefore=ssh.service\nConditionPathExists=!/etc/ssh/ssh_host_ed25519_key\n[Service]\nType=oneshot\nExecStart=/usr/bin/ssh-keygen -A\n[Install]\nWantedBy=multi-user.target\n' \
        >/etc/systemd/system/ssh-host-keys.service \
    && systemctl enable ssh-host-keys.service

STOPSIGNAL SIGRTMIN+3
ENV container=docker
CMD ["/lib/systemd/systemd"]
