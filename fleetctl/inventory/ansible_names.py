"""The ``ansible_*`` variable names Ansible knows, so that a misspelt one (``ansible_prot``) is an
error with a did-you-mean instead of a setting silently ignored.

Gathered from ansible-core 2.19 (the ``vars:`` of every connection, become, shell, lookup and
inventory plugin option and doc fragment, ``MAGIC_VARIABLE_MAPPING``, ``INTERNAL_STATIC_VARS``) and
the "Special variables" page (https://docs.ansible.com/ansible/latest/reference_appendices/special_variables.html).
tests/test_inventory_ansible.py checks that every name the installed ansible-core declares is here.
Names of the form ``ansible_<LANGUAGE>_interpreter`` are known too (:data:`INTERPRETER`).
"""

from __future__ import annotations

import re

__all__ = ["ANSIBLE_NAMES", "INTERPRETER", "is_ansible_name"]

ANSIBLE_NAMES: frozenset[str] = frozenset((
    "ansible_admin_users", "ansible_async_dir", "ansible_async_path", "ansible_become", "ansible_become_exe",
    "ansible_become_flags", "ansible_become_method", "ansible_become_pass", "ansible_become_password",
    "ansible_become_user", "ansible_check_mode", "ansible_collection_name", "ansible_common_remote_group",
    "ansible_config_file", "ansible_connection", "ansible_connection_user", "ansible_control_path",
    "ansible_control_path_dir", "ansible_dependent_role_names", "ansible_deprecation_warnings",
    "ansible_diff_mode", "ansible_docker_extra_args", "ansible_env", "ansible_facts", "ansible_facts_modules",
    "ansible_failed_result", "ansible_failed_task", "ansible_forks", "ansible_fqdn", "ansible_group_priority",
    "ansible_host", "ansible_host_key_checking", "ansible_hostname", "ansible_index_var",
    "ansible_interpreter_python_fallback", "ansible_inventory_sources", "ansible_limit", "ansible_local",
    "ansible_local_become_strip_preamble", "ansible_local_become_success_timeout", "ansible_lookup_url_agent",
    "ansible_lookup_url_ca_path", "ansible_lookup_url_ciphers", "ansible_lookup_url_follow_redirects",
    "ansible_lookup_url_force", "ansible_lookup_url_force_basic_auth", "ansible_lookup_url_timeout",
    "ansible_lookup_url_unix_socket", "ansible_lookup_url_unredir_headers", "ansible_lookup_url_use_gssapi",
    "ansible_lookup_url_use_netrc", "ansible_loop", "ansible_loop_var", "ansible_managed",
    "ansible_module_compression", "ansible_network_os", "ansible_no_target_syslog", "ansible_nodename",
    "ansible_paramiko_host", "ansible_paramiko_host_key_checking", "ansible_paramiko_pass",
    "ansible_paramiko_password", "ansible_paramiko_port", "ansible_paramiko_private_key_file",
    "ansible_paramiko_proxy_command", "ansible_paramiko_timeout", "ansible_paramiko_use_rsa_sha2_algorithms",
    "ansible_paramiko_user", "ansible_parent_role_names", "ansible_parent_role_paths", "ansible_password",
    "ansible_pipelining", "ansible_play_batch", "ansible_play_hosts", "ansible_play_hosts_all",
    "ansible_play_name", "ansible_play_role_names", "ansible_playbook_python", "ansible_port",
    "ansible_private_key", "ansible_private_key_file", "ansible_private_key_passphrase", "ansible_psrp_auth",
    "ansible_psrp_ca_cert", "ansible_psrp_cert_trust_path", "ansible_psrp_cert_validation",
    "ansible_psrp_certificate_key_pem", "ansible_psrp_certificate_pem", "ansible_psrp_configuration_name",
    "ansible_psrp_connection_backoff", "ansible_psrp_connection_timeout",
    "ansible_psrp_credssp_auth_mechanism", "ansible_psrp_credssp_disable_tlsv1_2",
    "ansible_psrp_credssp_minimum_version", "ansible_psrp_host", "ansible_psrp_ignore_proxy",
    "ansible_psrp_max_envelope_size", "ansible_psrp_message_encryption", "ansible_psrp_negotiate_delegate",
    "ansible_psrp_negotiate_hostname_override", "ansible_psrp_negotiate_send_cbt",
    "ansible_psrp_negotiate_service", "ansible_psrp_operation_timeout", "ansible_psrp_path",
    "ansible_psrp_port", "ansible_psrp_protocol", "ansible_psrp_proxy", "ansible_psrp_read_timeout",
    "ansible_psrp_reconnection_backoff", "ansible_psrp_reconnection_retries", "ansible_psrp_user",
    "ansible_python_interpreter", "ansible_python_module_rlimit_nofile", "ansible_remote_tmp",
    "ansible_role_name", "ansible_role_names", "ansible_run_tags", "ansible_runas_flags", "ansible_runas_pass",
    "ansible_runas_user", "ansible_scp_executable", "ansible_scp_extra_args", "ansible_search_path",
    "ansible_sftp_batch_mode", "ansible_sftp_executable", "ansible_sftp_extra_args",
    "ansible_shell_allow_world_readable_temp", "ansible_shell_executable", "ansible_shell_type",
    "ansible_skip_tags", "ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_executable",
    "ansible_ssh_extra_args", "ansible_ssh_host", "ansible_ssh_host_key_checking", "ansible_ssh_pass",
    "ansible_ssh_password", "ansible_ssh_password_mechanism", "ansible_ssh_pipelining",
    "ansible_ssh_pkcs11_provider", "ansible_ssh_port", "ansible_ssh_private_key",
    "ansible_ssh_private_key_file", "ansible_ssh_private_key_passphrase", "ansible_ssh_retries",
    "ansible_ssh_timeout", "ansible_ssh_transfer_method", "ansible_ssh_use_tty", "ansible_ssh_user",
    "ansible_ssh_verbosity", "ansible_sshpass_prompt", "ansible_su_exe", "ansible_su_flags", "ansible_su_pass",
    "ansible_su_prompt_l10n", "ansible_su_user", "ansible_sudo_chdir", "ansible_sudo_exe",
    "ansible_sudo_flags", "ansible_sudo_pass", "ansible_sudo_user", "ansible_system_tmpdirs",
    "ansible_target_log_info", "ansible_timeout", "ansible_user", "ansible_verbosity", "ansible_version",
    "ansible_win_async_startup_timeout", "ansible_winrm_connection_timeout", "ansible_winrm_host",
    "ansible_winrm_kinit_args", "ansible_winrm_kinit_cmd", "ansible_winrm_kinit_env_vars",
    "ansible_winrm_kinit_mode", "ansible_winrm_pass", "ansible_winrm_password", "ansible_winrm_path",
    "ansible_winrm_port", "ansible_winrm_scheme", "ansible_winrm_transport", "ansible_winrm_user",
))

INTERPRETER = re.compile(r"ansible_\w+_interpreter")
"""``ansible_python_interpreter``, ``ansible_perl_interpreter``...: Ansible's per-language interpreters."""


def is_ansible_name(name: str) -> bool:
    """True for a variable name Ansible itself gives a meaning."""
    return name in ANSIBLE_NAMES or INTERPRETER.fullmatch(name) is not None
