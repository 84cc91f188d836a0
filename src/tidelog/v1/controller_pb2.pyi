from tidelog.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ElectionType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PREFERRED: _ClassVar[ElectionType]
    UNCLEAN: _ClassVar[ElectionType]
PREFERRED: ElectionType
UNCLEAN: ElectionType

class AclBinding(_message.Message):
    __slots__ = ("principal", "host", "operation", "permission", "resource_type", "resource_name", "pattern_type")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    principal: str
    host: str
    operation: str
    permission: str
    resource_type: str
    resource_name: str
    pattern_type: str
    def __init__(self, principal: _Optional[str] = ..., host: _Optional[str] = ..., operation: _Optional[str] = ..., permission: _Optional[str] = ..., resource_type: _Optional[str] = ..., resource_name: _Optional[str] = ..., pattern_type: _Optional[str] = ...) -> None: ...

class AclFilter(_message.Message):
    __slots__ = ("principal", "host", "operation", "permission", "resource_type", "resource_name", "pattern_type")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_TYPE_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_NAME_FIELD_NUMBER: _ClassVar[int]
    PATTERN_TYPE_FIELD_NUMBER: _ClassVar[int]
    principal: str
    host: str
    operation: str
    permission: str
    resource_type: str
    resource_name: str
    pattern_type: str
    def __init__(self, principal: _Optional[str] = ..., host: _Optional[str] = ..., operation: _Optional[str] = ..., permission: _Optional[str] = ..., resource_type: _Optional[str] = ..., resource_name: _Optional[str] = ..., pattern_type: _Optional[str] = ...) -> None: ...

class CreateAclsRequest(_message.Message):
    __slots__ = ("creations",)
    CREATIONS_FIELD_NUMBER: _ClassVar[int]
    creations: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, creations: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class CreateAclsResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class DeleteAclsRequest(_message.Message):
    __slots__ = ("filters",)
    FILTERS_FIELD_NUMBER: _ClassVar[int]
    filters: _containers.RepeatedCompositeFieldContainer[AclFilter]
    def __init__(self, filters: _Optional[_Iterable[_Union[AclFilter, _Mapping]]] = ...) -> None: ...

class DeleteAclsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "deleted")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DELETED_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    deleted: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., deleted: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class DescribeAclsRequest(_message.Message):
    __slots__ = ("filter",)
    FILTER_FIELD_NUMBER: _ClassVar[int]
    filter: AclFilter
    def __init__(self, filter: _Optional[_Union[AclFilter, _Mapping]] = ...) -> None: ...

class DescribeAclsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "bindings")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    BINDINGS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    bindings: _containers.RepeatedCompositeFieldContainer[AclBinding]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., bindings: _Optional[_Iterable[_Union[AclBinding, _Mapping]]] = ...) -> None: ...

class ScramCredentialUpsertion(_message.Message):
    __slots__ = ("name", "mechanism", "iterations", "salt", "salted_password")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    SALT_FIELD_NUMBER: _ClassVar[int]
    SALTED_PASSWORD_FIELD_NUMBER: _ClassVar[int]
    name: str
    mechanism: str
    iterations: int
    salt: bytes
    salted_password: bytes
    def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[str] = ..., iterations: _Optional[int] = ..., salt: _Optional[bytes] = ..., salted_password: _Optional[bytes] = ...) -> None: ...

class ScramCredentialDeletion(_message.Message):
    __slots__ = ("name", "mechanism")
    NAME_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    name: str
    mechanism: str
    def __init__(self, name: _Optional[str] = ..., mechanism: _Optional[str] = ...) -> None: ...

class AlterUserScramCredentialsRequest(_message.Message):
    __slots__ = ("deletions", "upsertions")
    DELETIONS_FIELD_NUMBER: _ClassVar[int]
    UPSERTIONS_FIELD_NUMBER: _ClassVar[int]
    deletions: _containers.RepeatedCompositeFieldContainer[ScramCredentialDeletion]
    upsertions: _containers.RepeatedCompositeFieldContainer[ScramCredentialUpsertion]
    def __init__(self, deletions: _Optional[_Iterable[_Union[ScramCredentialDeletion, _Mapping]]] = ..., upsertions: _Optional[_Iterable[_Union[ScramCredentialUpsertion, _Mapping]]] = ...) -> None: ...

class UserResult(_message.Message):
    __slots__ = ("user", "error_code", "error_message")
    USER_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    user: str
    error_code: int
    error_message: str
    def __init__(self, user: _Optional[str] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class AlterUserScramCredentialsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "results")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    results: _containers.RepeatedCompositeFieldContainer[UserResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., results: _Optional[_Iterable[_Union[UserResult, _Mapping]]] = ...) -> None: ...

class DescribeUserScramCredentialsRequest(_message.Message):
    __slots__ = ("users",)
    USERS_FIELD_NUMBER: _ClassVar[int]
    users: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, users: _Optional[_Iterable[str]] = ...) -> None: ...

class UserScramDescription(_message.Message):
    __slots__ = ("user", "mechanism", "iterations")
    USER_FIELD_NUMBER: _ClassVar[int]
    MECHANISM_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    user: str
    mechanism: str
    iterations: int
    def __init__(self, user: _Optional[str] = ..., mechanism: _Optional[str] = ..., iterations: _Optional[int] = ...) -> None: ...

class DescribeUserScramCredentialsResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "users")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    USERS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    users: _containers.RepeatedCompositeFieldContainer[UserScramDescription]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., users: _Optional[_Iterable[_Union[UserScramDescription, _Mapping]]] = ...) -> None: ...

class QuotaEntityPart(_message.Message):
    __slots__ = ("entity_type", "name", "is_default")
    ENTITY_TYPE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    IS_DEFAULT_FIELD_NUMBER: _ClassVar[int]
    entity_type: str
    name: str
    is_default: bool
    def __init__(self, entity_type: _Optional[str] = ..., name: _Optional[str] = ..., is_default: _Optional[bool] = ...) -> None: ...

class QuotaValue(_message.Message):
    __slots__ = ("key", "value", "remove")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    REMOVE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: float
    remove: bool
    def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ..., remove: _Optional[bool] = ...) -> None: ...

class QuotaAlteration(_message.Message):
    __slots__ = ("entity", "ops")
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    OPS_FIELD_NUMBER: _ClassVar[int]
    entity: _containers.RepeatedCompositeFieldContainer[QuotaEntityPart]
    ops: _containers.RepeatedCompositeFieldContainer[QuotaValue]
    def __init__(self, entity: _Optional[_Iterable[_Union[QuotaEntityPart, _Mapping]]] = ..., ops: _Optional[_Iterable[_Union[QuotaValue, _Mapping]]] = ...) -> None: ...

class AlterClientQuotasRequest(_message.Message):
    __slots__ = ("entries",)
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[QuotaAlteration]
    def __init__(self, entries: _Optional[_Iterable[_Union[QuotaAlteration, _Mapping]]] = ...) -> None: ...

class AlterClientQuotasResponse(_message.Message):
    __slots__ = ("error_code", "error_message")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class DescribeClientQuotasRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class QuotaEntry(_message.Message):
    __slots__ = ("entity", "values")
    class ValuesEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ENTITY_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    entity: _containers.RepeatedCompositeFieldContainer[QuotaEntityPart]
    values: _containers.ScalarMap[str, float]
    def __init__(self, entity: _Optional[_Iterable[_Union[QuotaEntityPart, _Mapping]]] = ..., values: _Optional[_Mapping[str, float]] = ...) -> None: ...

class DescribeClientQuotasResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "entries")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    entries: _containers.RepeatedCompositeFieldContainer[QuotaEntry]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[QuotaEntry, _Mapping]]] = ...) -> None: ...

class TopicResult(_message.Message):
    __slots__ = ("name", "error_code", "error_message")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    name: str
    error_code: int
    error_message: str
    def __init__(self, name: _Optional[str] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class NewTopic(_message.Message):
    __slots__ = ("name", "num_partitions", "replication_factor", "configs")
    class ConfigsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    NUM_PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    REPLICATION_FACTOR_FIELD_NUMBER: _ClassVar[int]
    CONFIGS_FIELD_NUMBER: _ClassVar[int]
    name: str
    num_partitions: int
    replication_factor: int
    configs: _containers.ScalarMap[str, str]
    def __init__(self, name: _Optional[str] = ..., num_partitions: _Optional[int] = ..., replication_factor: _Optional[int] = ..., configs: _Optional[_Mapping[str, str]] = ...) -> None: ...

class CreateTopicsRequest(_message.Message):
    __slots__ = ("topics", "validate_only")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    VALIDATE_ONLY_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[NewTopic]
    validate_only: bool
    def __init__(self, topics: _Optional[_Iterable[_Union[NewTopic, _Mapping]]] = ..., validate_only: _Optional[bool] = ...) -> None: ...

class CreateTopicsResponse(_message.Message):
    __slots__ = ("topics", "controller_endpoint")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicResult]
    controller_endpoint: str
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicResult, _Mapping]]] = ..., controller_endpoint: _Optional[str] = ...) -> None: ...

class DeleteTopicsRequest(_message.Message):
    __slots__ = ("names",)
    NAMES_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, names: _Optional[_Iterable[str]] = ...) -> None: ...

class DeleteTopicsResponse(_message.Message):
    __slots__ = ("topics", "controller_endpoint")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicResult]
    controller_endpoint: str
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicResult, _Mapping]]] = ..., controller_endpoint: _Optional[str] = ...) -> None: ...

class PartitionIncrease(_message.Message):
    __slots__ = ("topic", "total_count")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    TOTAL_COUNT_FIELD_NUMBER: _ClassVar[int]
    topic: str
    total_count: int
    def __init__(self, topic: _Optional[str] = ..., total_count: _Optional[int] = ...) -> None: ...

class CreatePartitionsRequest(_message.Message):
    __slots__ = ("topics",)
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[PartitionIncrease]
    def __init__(self, topics: _Optional[_Iterable[_Union[PartitionIncrease, _Mapping]]] = ...) -> None: ...

class CreatePartitionsResponse(_message.Message):
    __slots__ = ("topics", "controller_endpoint")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicResult]
    controller_endpoint: str
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicResult, _Mapping]]] = ..., controller_endpoint: _Optional[str] = ...) -> None: ...

class ConfigChange(_message.Message):
    __slots__ = ("topic", "set", "delete")
    class SetEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    SET_FIELD_NUMBER: _ClassVar[int]
    DELETE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    set: _containers.ScalarMap[str, str]
    delete: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, topic: _Optional[str] = ..., set: _Optional[_Mapping[str, str]] = ..., delete: _Optional[_Iterable[str]] = ...) -> None: ...

class AlterConfigsRequest(_message.Message):
    __slots__ = ("changes",)
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    changes: _containers.RepeatedCompositeFieldContainer[ConfigChange]
    def __init__(self, changes: _Optional[_Iterable[_Union[ConfigChange, _Mapping]]] = ...) -> None: ...

class AlterConfigsResponse(_message.Message):
    __slots__ = ("topics", "controller_endpoint")
    TOPICS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    topics: _containers.RepeatedCompositeFieldContainer[TopicResult]
    controller_endpoint: str
    def __init__(self, topics: _Optional[_Iterable[_Union[TopicResult, _Mapping]]] = ..., controller_endpoint: _Optional[str] = ...) -> None: ...

class DescribeClusterRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DescribeClusterResponse(_message.Message):
    __slots__ = ("error_code", "controller_id", "controller_epoch", "controller_endpoint", "brokers", "controllers", "authorizer_enabled")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ID_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    BROKERS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLERS_FIELD_NUMBER: _ClassVar[int]
    AUTHORIZER_ENABLED_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    controller_id: int
    controller_epoch: int
    controller_endpoint: str
    brokers: _containers.RepeatedCompositeFieldContainer[_common_pb2.BrokerEndpoint]
    controllers: _containers.RepeatedScalarFieldContainer[str]
    authorizer_enabled: bool
    def __init__(self, error_code: _Optional[int] = ..., controller_id: _Optional[int] = ..., controller_epoch: _Optional[int] = ..., controller_endpoint: _Optional[str] = ..., brokers: _Optional[_Iterable[_Union[_common_pb2.BrokerEndpoint, _Mapping]]] = ..., controllers: _Optional[_Iterable[str]] = ..., authorizer_enabled: _Optional[bool] = ...) -> None: ...

class PartitionIsrChange(_message.Message):
    __slots__ = ("topic", "partition", "leader_epoch", "partition_epoch", "new_isr", "new_isr_incarnations")
    class NewIsrIncarnationsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: int
        value: str
        def __init__(self, key: _Optional[int] = ..., value: _Optional[str] = ...) -> None: ...
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    LEADER_EPOCH_FIELD_NUMBER: _ClassVar[int]
    PARTITION_EPOCH_FIELD_NUMBER: _ClassVar[int]
    NEW_ISR_FIELD_NUMBER: _ClassVar[int]
    NEW_ISR_INCARNATIONS_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: _containers.RepeatedScalarFieldContainer[int]
    new_isr_incarnations: _containers.ScalarMap[int, str]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., leader_epoch: _Optional[int] = ..., partition_epoch: _Optional[int] = ..., new_isr: _Optional[_Iterable[int]] = ..., new_isr_incarnations: _Optional[_Mapping[int, str]] = ...) -> None: ...

class AlterPartitionRequest(_message.Message):
    __slots__ = ("broker_id", "partitions")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionIsrChange]
    def __init__(self, broker_id: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionIsrChange, _Mapping]]] = ...) -> None: ...

class PartitionIsrResult(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message", "state")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: int
    error_message: str
    state: _common_pb2.PartitionState
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., state: _Optional[_Union[_common_pb2.PartitionState, _Mapping]] = ...) -> None: ...

class AlterPartitionResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "controller_endpoint", "partitions")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    controller_endpoint: str
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionIsrResult]
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., controller_endpoint: _Optional[str] = ..., partitions: _Optional[_Iterable[_Union[PartitionIsrResult, _Mapping]]] = ...) -> None: ...

class TopicPartitionRef(_message.Message):
    __slots__ = ("topic", "partition")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ...) -> None: ...

class PartitionResult(_message.Message):
    __slots__ = ("topic", "partition", "error_code", "error_message")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    error_code: int
    error_message: str
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., error_code: _Optional[int] = ..., error_message: _Optional[str] = ...) -> None: ...

class ElectLeadersRequest(_message.Message):
    __slots__ = ("election_type", "partitions")
    ELECTION_TYPE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    election_type: ElectionType
    partitions: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    def __init__(self, election_type: _Optional[_Union[ElectionType, str]] = ..., partitions: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ...) -> None: ...

class ElectLeadersResponse(_message.Message):
    __slots__ = ("error_code", "partitions", "controller_endpoint")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionResult]
    controller_endpoint: str
    def __init__(self, error_code: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionResult, _Mapping]]] = ..., controller_endpoint: _Optional[str] = ...) -> None: ...

class ReassignablePartition(_message.Message):
    __slots__ = ("topic", "partition", "replicas", "cancel")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    cancel: bool
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., cancel: _Optional[bool] = ...) -> None: ...

class AlterPartitionReassignmentsRequest(_message.Message):
    __slots__ = ("partitions",)
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    partitions: _containers.RepeatedCompositeFieldContainer[ReassignablePartition]
    def __init__(self, partitions: _Optional[_Iterable[_Union[ReassignablePartition, _Mapping]]] = ...) -> None: ...

class AlterPartitionReassignmentsResponse(_message.Message):
    __slots__ = ("error_code", "partitions", "controller_endpoint")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    PARTITIONS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    partitions: _containers.RepeatedCompositeFieldContainer[PartitionResult]
    controller_endpoint: str
    def __init__(self, error_code: _Optional[int] = ..., partitions: _Optional[_Iterable[_Union[PartitionResult, _Mapping]]] = ..., controller_endpoint: _Optional[str] = ...) -> None: ...

class ListPartitionReassignmentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class OngoingReassignment(_message.Message):
    __slots__ = ("topic", "partition", "replicas", "adding", "removing")
    TOPIC_FIELD_NUMBER: _ClassVar[int]
    PARTITION_FIELD_NUMBER: _ClassVar[int]
    REPLICAS_FIELD_NUMBER: _ClassVar[int]
    ADDING_FIELD_NUMBER: _ClassVar[int]
    REMOVING_FIELD_NUMBER: _ClassVar[int]
    topic: str
    partition: int
    replicas: _containers.RepeatedScalarFieldContainer[int]
    adding: _containers.RepeatedScalarFieldContainer[int]
    removing: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, topic: _Optional[str] = ..., partition: _Optional[int] = ..., replicas: _Optional[_Iterable[int]] = ..., adding: _Optional[_Iterable[int]] = ..., removing: _Optional[_Iterable[int]] = ...) -> None: ...

class ListPartitionReassignmentsResponse(_message.Message):
    __slots__ = ("error_code", "reassignments", "controller_endpoint")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    REASSIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    reassignments: _containers.RepeatedCompositeFieldContainer[OngoingReassignment]
    controller_endpoint: str
    def __init__(self, error_code: _Optional[int] = ..., reassignments: _Optional[_Iterable[_Union[OngoingReassignment, _Mapping]]] = ..., controller_endpoint: _Optional[str] = ...) -> None: ...

class ControlledShutdownRequest(_message.Message):
    __slots__ = ("broker_id", "broker_incarnation")
    BROKER_ID_FIELD_NUMBER: _ClassVar[int]
    BROKER_INCARNATION_FIELD_NUMBER: _ClassVar[int]
    broker_id: int
    broker_incarnation: str
    def __init__(self, broker_id: _Optional[int] = ..., broker_incarnation: _Optional[str] = ...) -> None: ...

class ControlledShutdownResponse(_message.Message):
    __slots__ = ("error_code", "error_message", "remaining", "controller_endpoint")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REMAINING_FIELD_NUMBER: _ClassVar[int]
    CONTROLLER_ENDPOINT_FIELD_NUMBER: _ClassVar[int]
    error_code: int
    error_message: str
    remaining: _containers.RepeatedCompositeFieldContainer[TopicPartitionRef]
    controller_endpoint: str
    def __init__(self, error_code: _Optional[int] = ..., error_message: _Optional[str] = ..., remaining: _Optional[_Iterable[_Union[TopicPartitionRef, _Mapping]]] = ..., controller_endpoint: _Optional[str] = ...) -> None: ...
