"""Shell completion: the scripts `mdiff completion bash` and `mdiff completion zsh` print, and the hidden
`mdiff __complete KIND [DIR]` they call at completion time.

A script holds, for each command of the program's parser when it was made (plugins' included), its
options, the options that take a value and what that value is, and what each positional argument is;
the names of a repository — branches, tags, remote-tracking refs, remotes — change, so the script asks
``mdiff __complete`` for them. That answer lists the names of ``.mdiff/refs/`` and ``.mdiff/remotes/``
as the repository's readers name them (§13.1: no link followed, hidden names skipped, invalid names
left out) without reading a ref or verifying a commit, and imports neither numpy nor h5py: it is quick.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

SHELLS = ("bash", "zsh")

# What a positional argument's word is, by its metavar (then by command and metavar): names of the
# repository (refs: branches, tags, remote-tracking refs and HEAD), files, folders, or fixed words.
_POSITIONAL_KINDS = {"REV": "refs", "START": "refs", "REF": "refs", "OLD": "refs+files", "NEW": "refs+files",
                     "BRANCH": "branches", "REMOTE": "remotes", "COMMAND": "commands", "DIR": "dirs",
                     "ADAPTER_DIR": "dirs"}
_COMMAND_POSITIONAL_KINDS = {("branch", "NAME"): "branches", ("tag", "NAME"): "tags", ("remote", "NAME"): "remotes",
                             ("pull", "BRANCH"): "branches", ("push", "BRANCH"): "branches"}
# The value of an option, by its metavar: a folder, a file, or nothing to complete (text, numbers).
_VALUE_KINDS = {"DIR": "dirs", "OUT": "files", "OUT.mdiff": "files", "FACTORS.safetensors": "files",
                "MASK.safetensors": "files", "BASE.onnx": "files", "BASE_CHECKPOINT": "files", "URL": "none"}
_NAME_KINDS = ("refs", "branches", "tags", "remotes")
_REMOTE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # §13.8, as mdiff.repo.remotes checks it


# ---------------------------------------------------------------- what the scripts know
def _words(choices) -> str:
    return "words:" + ",".join(str(c) for c in choices)


def _value_kind(action: argparse.Action) -> str:
    if action.choices:
        return _words(action.choices)
    return _VALUE_KINDS.get(str(action.metavar), "none")


def _positional_kind(command: str, action: argparse.Action) -> str:
    if action.choices:
        kind = _words(action.choices)
    else:
        metavar = str(action.metavar or action.dest).upper()
        kind = _COMMAND_POSITIONAL_KINDS.get((command, metavar)) or _POSITIONAL_KINDS.get(metavar, "files")
    return kind + ("*" if action.nargs in ("*", "+", argparse.REMAINDER) else "")


def _table(program: argparse.ArgumentParser) -> list[dict]:
    """For each command: name, help, options [(string, help)], takes {option: value kind}, positionals [kind]."""
    from mdiff.cli.dispatch import subcommands

    action = next(a for a in program._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
    rows = []
    for name, parser in subcommands(program).items():
        if name.startswith("_"):
            continue
        options: list[tuple[str, str]] = []
        takes: dict[str, str] = {}
        positionals = []
        for a in parser._actions:
            if not a.option_strings:
                positionals.append(_positional_kind(name, a))
                continue
            shown = a.help is not argparse.SUPPRESS
            for string in a.option_strings:
                if shown:
                    options.append((string, a.help or ""))
                if a.nargs != 0:
                    takes[string] = _value_kind(a)
        rows.append({"name": name, "help": helps.get(name, ""), "options": options, "takes": takes,
                     "positionals": positionals})
    return rows


def _globals(program: argparse.ArgumentParser) -> tuple[list[tuple[str, str]], dict[str, str]]:
    options, takes = [], {}
    for a in program._actions:
        if a.option_strings and a.help is not argparse.SUPPRESS:
            options += [(s, a.help or "") for s in a.option_strings]
            if a.nargs != 0:
                takes.update({s: _value_kind(a) for s in a.option_strings})
    return options, takes


def script(shell: str, program: argparse.ArgumentParser) -> str:
    """The completion script for ``shell`` (bash or zsh) of the program whose parser is ``program``."""
    rows = _table(program)
    options, takes = _globals(program)
    return (_bash if shell == "bash" else _zsh)(rows, options, takes)


def _sq(text: str) -> str:
    """``text`` as one single-quoted shell word."""
    return "'" + text.replace("'", "'\\''") + "'"


def _takes(takes: dict[str, str]) -> str:
    return " ".join(f"{option}={kind}" for option, kind in takes.items())


# ---------------------------------------------------------------- bash
_BASH_HEAD = r'''# bash completion for mdiff: commands, their options, and the repository's branches, tags and remotes.
# Load it with `source <(mdiff completion bash)`, e.g. in ~/.bashrc (or save it in
# ~/.local/share/bash-completion/completions/mdiff). Made by `mdiff completion bash`: make it again after
# installing a plugin that adds commands.

_mdiff_commands=__COMMANDS__
_mdiff_global_options=__GLOBAL_OPTIONS__
_mdiff_global_takes=__GLOBAL_TAKES__

# The kind of value OPTION takes, from a list of OPTION=KIND words; nothing when it takes none.
_mdiff_takes() {
    local pair
    for pair in $2; do
        [ "${pair%%=*}" = "$1" ] && { printf '%s' "${pair#*=}"; return; }
    done
}

# Add the candidates of KIND (refs, branches, tags, remotes, commands, files, dirs, words:A,B, options,
# none; several joined by +) for the word CUR to COMPREPLY.
_mdiff_add() {
    local cur="$1" kind IFS=$'\n'
    for kind in ${2//+/$'\n'}; do
        case "$kind" in
            refs|branches|tags|remotes)
                COMPREPLY+=($(compgen -W "$("$_mdiff_program" __complete "$kind" "$_mdiff_dir" 2>/dev/null)" -- "$cur"));;
            commands) COMPREPLY+=($(IFS=' '; compgen -W "$_mdiff_commands" -- "$cur"));;
            options) COMPREPLY+=($(IFS=' '; compgen -W "$_mdiff_options" -- "$cur"));;
            files) compopt -o filenames 2>/dev/null; COMPREPLY+=($(compgen -f -- "$cur"));;
            dirs) compopt -o filenames 2>/dev/null; COMPREPLY+=($(compgen -d -- "$cur"));;
            words:*) local list="${kind#words:}"; COMPREPLY+=($(IFS=' '; compgen -W "${list//,/ }" -- "$cur"));;
        esac
    done
}

_mdiff() {
    local cur="${COMP_WORDS[COMP_CWORD]}" i=1 cmd="" at=0 w kind value="" n=0 only=0
    local _mdiff_program="${COMP_WORDS[0]}" _mdiff_dir="" _mdiff_options="" takes="" pos=""
    COMPREPLY=()
    # the command: the first word after the options before it (-C DIR, --threads N, -q)
    while [ "$i" -lt "$COMP_CWORD" ]; do
        w="${COMP_WORDS[i]}"
        if [[ "$w" == -* ]]; then
            kind="$(_mdiff_takes "$w" "$_mdiff_global_takes")"
            if [ -n "$kind" ]; then
                [ $((i + 1)) -eq "$COMP_CWORD" ] && value="$kind"
                [ "$w" = -C ] && _mdiff_dir="${COMP_WORDS[i+1]}"
                i=$((i + 1))
            fi
            i=$((i + 1))
        else
            cmd="$w"; at=$i; break
        fi
    done
    if [ -z "$cmd" ]; then
        _mdiff_options="$_mdiff_global_options"
        if [ -n "$value" ]; then _mdiff_add "$cur" "$value"
        elif [[ "$cur" == -* ]]; then _mdiff_add "$cur" options
        else _mdiff_add "$cur" commands; fi
        return 0
    fi
    case "$cmd" in
__CASES__
        *) return 0;;
    esac
    # which positional argument the word is, or which option's value
    i=$((at + 1))
    while [ "$i" -lt "$COMP_CWORD" ]; do
        w="${COMP_WORDS[i]}"
        if [ "$only" = 0 ] && [ "$w" = -- ]; then
            only=1
        elif [ "$only" = 0 ] && [[ "$w" == -?* ]]; then
            kind="$(_mdiff_takes "$w" "$takes")"
            if [ -n "$kind" ]; then
                [ $((i + 1)) -eq "$COMP_CWORD" ] && value="$kind"
                case "$w" in -C|--repo) _mdiff_dir="${COMP_WORDS[i+1]}";; esac
                i=$((i + 1))
            fi
        else
            n=$((n + 1))
        fi
        i=$((i + 1))
    done
    if [ -n "$value" ]; then _mdiff_add "$cur" "$value"; return 0; fi
    if [ "$only" = 0 ] && [[ "$cur" == -* ]]; then _mdiff_add "$cur" options; return 0; fi
    local -a kinds
    IFS=' ' read -r -a kinds <<< "$pos"
    [ "${#kinds[@]}" -eq 0 ] && return 0
    if [ "$n" -lt "${#kinds[@]}" ]; then kind="${kinds[n]}"; else kind="${kinds[${#kinds[@]}-1]}"; fi
    if [ "$n" -ge "${#kinds[@]}" ] && [[ "$kind" != *'*' ]]; then return 0; fi
    _mdiff_add "$cur" "${kind%'*'}"
}

complete -F _mdiff mdiff
'''


def _bash(rows: list[dict], options: list[tuple[str, str]], takes: dict[str, str]) -> str:
    cases = []
    for row in rows:
        opts = " ".join(dict.fromkeys(string for string, _ in row["options"]))
        cases.append(f"        {_sq(row['name'])}) _mdiff_options={_sq(opts)}; takes={_sq(_takes(row['takes']))}; "
                     f"pos={_sq(' '.join(row['positionals']))};;")
    return (_BASH_HEAD.replace("__COMMANDS__", _sq(" ".join(row["name"] for row in rows)))
            .replace("__GLOBAL_OPTIONS__", _sq(" ".join(dict.fromkeys(s for s, _ in options))))
            .replace("__GLOBAL_TAKES__", _sq(_takes(takes)))
            .replace("__CASES__", "\n".join(cases)))


# ---------------------------------------------------------------- zsh
_ZSH_HEAD = r'''#compdef mdiff
# zsh completion for mdiff: commands, their options, and the repository's branches, tags and remotes.
# Load it with `source <(mdiff completion zsh)` after compinit (`autoload -Uz compinit && compinit`),
# e.g. in ~/.zshrc; or save it as _mdiff in a folder of $fpath. Made by `mdiff completion zsh`: make it
# again after installing a plugin that adds commands.

_mdiff_add() {  # KIND (refs, branches, tags, remotes, commands, files, dirs, words:A,B, options, none; joined by +)
    local kind
    for kind in ${(s:+:)1}; do
        case $kind in
            refs|branches|tags|remotes)
                local -a names
                names=(${(f)"$(${words[1]} __complete $kind "$_mdiff_dir" 2>/dev/null)"})
                compadd -- $names;;
            commands) _describe -t commands 'mdiff command' _mdiff_commands;;
            options) _describe -t options 'option' _mdiff_options;;
            files) _files;;
            dirs) _files -/;;
            words:*) compadd -- ${(s:,:)${kind#words:}};;
        esac
    done
}

_mdiff_takes() {  # OPTION, OPTION=KIND words: the kind of value OPTION takes
    local pair
    for pair in ${=2}; do
        [[ ${pair%%=*} == "$1" ]] && { print -r -- ${pair#*=}; return; }
    done
}

_mdiff() {
    local -a _mdiff_commands _mdiff_options kinds
    local cmd="" at=0 i=2 w kind value="" n=0 only=0 _mdiff_dir="" takes="" pos=""
    _mdiff_commands=(
__COMMANDS__
    )
    _mdiff_options=(
__GLOBAL_OPTIONS__
    )
    takes=__GLOBAL_TAKES__
    while (( i < CURRENT )); do
        w=${words[i]}
        if [[ $w == -* ]]; then
            kind=$(_mdiff_takes $w "$takes")
            if [[ -n $kind ]]; then
                (( i + 1 == CURRENT )) && value=$kind
                [[ $w == -C ]] && _mdiff_dir=${words[i+1]}
                (( i++ ))
            fi
            (( i++ ))
        else
            cmd=$w; at=$i; break
        fi
    done
    if [[ -z $cmd ]]; then
        if [[ -n $value ]]; then _mdiff_add $value
        elif [[ ${words[CURRENT]} == -* ]]; then _mdiff_add options
        else _mdiff_add commands; fi
        return
    fi
    case $cmd in
__CASES__
        *) return;;
    esac
    (( i = at + 1 ))
    while (( i < CURRENT )); do
        w=${words[i]}
        if (( ! only )) && [[ $w == -- ]]; then
            only=1
        elif (( ! only )) && [[ $w == -?* ]]; then
            kind=$(_mdiff_takes $w "$takes")
            if [[ -n $kind ]]; then
                (( i + 1 == CURRENT )) && value=$kind
                [[ $w == (-C|--repo) ]] && _mdiff_dir=${words[i+1]}
                (( i++ ))
            fi
        else
            (( n++ ))
        fi
        (( i++ ))
    done
    if [[ -n $value ]]; then _mdiff_add $value; return; fi
    if (( ! only )) && [[ ${words[CURRENT]} == -* ]]; then _mdiff_add options; return; fi
    kinds=(${=pos})
    (( ${#kinds} )) || return
    if (( n < ${#kinds} )); then kind=${kinds[n+1]}; else kind=${kinds[-1]}; fi
    if (( n >= ${#kinds} )) && [[ $kind != *'*' ]]; then return; fi
    _mdiff_add ${kind%'*'}
}

if (( $+functions[compdef] )); then
    compdef _mdiff mdiff
fi
'''


def _zsh_item(name: str, help: str) -> str:
    """One ``name:description`` entry of _describe, quoted (a colon in the name escaped)."""
    return "        " + _sq(name.replace(":", "\\:") + ":" + " ".join(help.split())[:120])


def _zsh(rows: list[dict], options: list[tuple[str, str]], takes: dict[str, str]) -> str:
    cases = []
    for row in rows:
        items = "\n".join(_zsh_item(string, help) for string, help in row["options"])
        cases.append(f"        {_sq(row['name'])})\n            _mdiff_options=(\n{items}\n            )\n"
                     f"            takes={_sq(_takes(row['takes']))}; pos={_sq(' '.join(row['positionals']))};;")
    return (_ZSH_HEAD.replace("__COMMANDS__", "\n".join(_zsh_item(row["name"], row["help"]) for row in rows))
            .replace("__GLOBAL_OPTIONS__", "\n".join(_zsh_item(s, h) for s, h in options))
            .replace("__GLOBAL_TAKES__", _sq(_takes(takes)))
            .replace("__CASES__", "\n".join(cases)))


# ---------------------------------------------------------------- mdiff __complete KIND [DIR]
def complete(words: list[str]) -> int:
    """`mdiff __complete KIND [DIR]`: the names of KIND (refs, branches, tags, remotes) of the repository
    containing DIR (default: the working folder), one a line; nothing, and exit 0, outside a repository
    or on any error — a completion never prints an error under the user's command line."""
    if not words or words[0] not in _NAME_KINDS or len(words) > 2:
        print(f"mdiff: usage: mdiff __complete {{{','.join(_NAME_KINDS)}}} [DIR]", file=sys.stderr)
        return 2
    try:
        names = repository_names(words[0], words[1] if len(words) > 1 and words[1] else ".")
    except Exception:  # noqa: BLE001 — a broken or unreadable repository completes nothing
        return 0
    try:
        sys.stdout.write("".join(f"{name}\n" for name in names))
        sys.stdout.flush()
    except BrokenPipeError:
        pass
    return 0


def repository_names(kind: str, start: str | os.PathLike[str] = ".") -> list[str]:
    """The names of ``kind`` in the repository containing ``start``: ``branches``, ``tags``, ``remotes``,
    or ``refs`` — every name a revision may start with: HEAD, branches, tags, remote-tracking refs
    (``origin/main``). Read from the names of the files of ``.mdiff/`` only (no ref is read)."""
    from mdiff.repo.folder import RepositoryFolder
    from mdiff.repo.names import REPO_DIR, valid_branch

    here = Path(start).resolve()
    root = next((c for c in (here, *here.parents) if os.path.lexists(c / REPO_DIR / "format")), None)
    if root is None:
        return []
    folder = RepositoryFolder(root)

    def under(*parts: str) -> list[str]:
        try:
            return folder._names_under(list(parts))
        except (FileNotFoundError, NotADirectoryError):
            return []

    branches = [n for n in under("refs", "heads") if valid_branch(n)]
    if kind == "branches":
        return branches
    tags = [n for n in under("refs", "tags") if valid_branch(n)]
    if kind == "tags":
        return tags
    remotes = sorted(n for n in under("remotes") if _REMOTE_NAME.fullmatch(n))
    if kind == "remotes":
        return remotes
    tracking = [n for n in under("refs", "remotes")
                if n.partition("/")[0] in remotes and valid_branch(n.partition("/")[2])]
    return ["HEAD", *branches, *[t for t in tags if t not in branches], *tracking]
