import OfflinePkgCLI

#if canImport(Glibc)
import Glibc
#endif

let arguments = Array(CommandLine.arguments.dropFirst())
OfflinePkgCommand.prepareProcess(for: arguments)
exit(OfflinePkgCommand.mainWaiting(arguments))
