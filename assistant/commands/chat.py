"""Open the terminal chat. Answers stream from the chosen model set through multi-level speculative
decoding; conversations are saved in the user data directory. With no model set registered, the demo set
(SmolLM2-135M-Instruct, upcast from a Q4_1 file) is imported and used."""

from __future__ import annotations

HELP = "chat in the terminal (the default command)"


def add_arguments(parser) -> None:
    parser.add_argument("--model-set", "-m", metavar="NAME", help="model set to use (default: the last used, "
                        "else the registry's default); remembered for next time")
    parser.add_argument("--new", action="store_true", help="start a new conversation instead of resuming the last")
    parser.add_argument("--resume", type=int, metavar="ID", help="open the conversation with this id")
    parser.add_argument("--target-rpc", metavar="HOST:PORT[,...]", help="run the target on the machine where "
                        "`assistant rpc-server` listens (the drafters stay here; several, comma-separated, share its layers) "
                        "for this session; to keep it, see "
                        "`assistant models remote`. The RPC protocol has no authentication: trusted networks only")


def run(args) -> int:
    from assistant import modelsets
    from assistant.conversation import settings as chat_settings
    from assistant.conversation.store import Store

    settings = chat_settings.load()
    if args.model_set:
        modelsets.get(args.model_set)  # fail here, with the list of known sets, rather than in the UI
        settings.model_set = args.model_set
        chat_settings.save(settings)
    if not modelsets.list_sets()[0]:
        from assistant.demo import model_set_or_demo

        model_set_or_demo()
    if args.target_rpc:
        from assistant.engine.devices import split_endpoints

        split_endpoints(args.target_rpc)
    store = Store()
    if args.resume is not None:
        store.conversation(args.resume)  # a clear error for an unknown id

    from assistant.ui.app import ChatApp

    ChatApp(settings, store, resume=args.resume, resume_latest=not args.new, target_rpc=args.target_rpc).run()
    store.close()
    return 0
