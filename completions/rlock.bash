# bash completion for rlock(1).                      -*- shell-script -*-
# SPDX-License-Identifier: BSD-3-Clause
# Completes the subcommands, each one's options and their values; after
# "run NAME --" it completes COMMAND as bash would a command line.

_rlock()
{
    local cur prev words cword
    _init_completion -n = || return

    local globals="--redis --tls --cacert --cert --key --sni --insecure
        --password-file --user --version --help"
    local commands="run status unlock list top ping demo"
    local i sub="" dashdash=0
    for (( i = 1; i < cword; i++ )); do
        case ${words[i]} in
            --redis|--cacert|--cert|--key|--sni|--password-file|--user)
                [ -z "$sub" ] && (( i++ )) ;;
            --) [ "$sub" = run ] && { dashdash=$i; break; } ;;
            -*) ;;
            *) [ -z "$sub" ] && sub=${words[i]} ;;
        esac
    done
    if (( dashdash )); then
        _command_offset $(( dashdash + 1 ))
        return
    fi

    case $prev in
        --cacert|--cert|--key|--password-file)
            _filedir; return ;;
        --layout)
            COMPREPLY=($(compgen -W "native redisson token" -- "$cur")); return ;;
        --on-lost)
            COMPREPLY=($(compgen -W "kill ignore" -- "$cur")); return ;;
        --redis)
            COMPREPLY=($(compgen -W "redis:// rediss:// unix:// redis-sentinel://
                redis-cluster:// redlock://" -- "$cur")); compopt -o nospace
            return ;;
        -w|--wait|-l|--lease|--kill-after|--seconds|--workers|-E|--conflict-exit-code|--sni|--user)
            return ;;
        --max-locks|--max-keys|--interval)
            return ;;
    esac

    case $sub in
        "")
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "$globals" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$commands" -- "$cur"))
            fi ;;
        run)
            COMPREPLY=($(compgen -W "-w --wait -n --nonblock -l --lease -E
                --conflict-exit-code -q --quiet -v --verbose --on-lost --kill-after
                --layout --help --" -- "$cur")) ;;
        status)
            COMPREPLY=($(compgen -W "--json --layout -v --verbose --help --" -- "$cur")) ;;
        unlock)
            COMPREPLY=($(compgen -W "--force --no-expiry --layout -v --verbose --help" -- "$cur")) ;;
        list)
            COMPREPLY=($(compgen -W "--json --all --layout --max-locks --max-keys
                -v --verbose --help --" -- "$cur")) ;;
        top)
            COMPREPLY=($(compgen -W "--once --interval --layout --max-locks
                --max-keys -v --verbose --help --" -- "$cur")) ;;
        demo)
            COMPREPLY=($(compgen -W "--workers --seconds --help" -- "$cur")) ;;
        ping)
            COMPREPLY=($(compgen -W "-v --verbose --help" -- "$cur")) ;;
    esac
} &&
    complete -F _rlock rlock
